"""Hostile files through every command that reads a trace.

Each file below once crashed, hung or exhausted memory in some command. Every one must now
end in output (exit 0, a bad line being a warning with its line number) or in exit 2 with a
message, never a traceback, and within a small budget of work: the commands run in-process
under a profile hook that counts function calls and stops a command past the budget (a
count of work, not a time, so a slow machine cannot fail it and a hang cannot pass it).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct

import pytest
from work_budget import within_budget

from ascend_memsim.cli import main
from ascend_memsim.observe.plain import SnapshotError, safe_unpickle

#: function calls (Python and C) one command may make on one of these small files; a
#: healthy run makes about 25,000
BUDGET = 400_000


def run_bounded(argv: list[str], capsys) -> tuple[int, str, str, int]:
    """``main(argv)`` under the work budget: (exit status, stdout, stderr, calls made)."""
    out = io.StringIO()
    code, calls = within_budget(main, argv, out=out, budget=BUDGET)
    return code, out.getvalue(), capsys.readouterr().err, calls


HEADER = json.dumps({"format": "ascend-memsim-trace", "version": 1, "product": "A2",
                     "hbm_bytes": 64 << 20})


def _jsonl(**fields) -> bytes:
    event = {"event": "malloc", "size": 100, "ptr": 4096, "device": 0, **fields}
    free = {"event": "free", "ptr": 4096}
    return f"{HEADER}\n{json.dumps(event)}\n{json.dumps(free)}\n".encode()


def _self_referential() -> bytes:
    cycle: list = []
    cycle.append(cycle)
    return pickle.dumps({"segments": cycle}, protocol=4)


def _shared_lists() -> bytes:
    shared: list = []
    for _ in range(40):
        shared = [shared, shared]     # 2**40 paths in under 300 bytes
    return pickle.dumps({"segments": shared}, protocol=4)


def _shared_entries() -> bytes:
    # one frame list and one entry named a thousand times by the pickle's memo
    frames = [{"filename": "train.py", "line": 1, "name": "step"}] * 50
    entry = {"action": "segment_alloc", "addr": 1 << 40, "size": 512, "stream": 0,
             "frames": frames}
    per_device = [entry] * 1000
    return pickle.dumps({"segments": [], "device_traces": [per_device] * 64}, protocol=4)


def _memo_bomb() -> bytes:
    # LONG_BINPUT at index 2**26: CPython's unpickler would size its memo to 1 GiB
    return b"\x80\x04N" + b"r" + struct.pack("<I", 1 << 26) + b"."


#: integers hash to themselves modulo 2**61 - 1: every multiple of it hashes to 0
_COLLIDING = [k * ((1 << 61) - 1) for k in range(1, 1500)]


def _colliding_keys(protocol: int = 4) -> bytes:
    # a dict built from n keys that hash alike costs n**2 probes (1.1 MB took 108 s)
    keys = dict.fromkeys(_COLLIDING, 0)
    return pickle.dumps({"segments": [], "device_traces": [[]], "allocator_settings": keys},
                        protocol=protocol)


def _colliding_set() -> bytes:
    return pickle.dumps({"segments": [], "device_traces": [[]], "x": set(_COLLIDING)},
                        protocol=4)


def _huge_frame_snapshot() -> bytes:
    frames = [{"filename": "x" * 100_000, "line": 1 << 4000, "name": ["not", "a", "name"]}]
    entry = {"action": "segment_alloc", "addr": 1 << 40, "size": 512, "stream": 0,
             "frames": frames}
    return pickle.dumps({"segments": [], "device_traces": [[entry]]}, protocol=4)


def _snapshot_far_device() -> bytes:
    segment = {"device": 100_000_000, "address": 1 << 40, "total_size": 512, "stream": 0}
    return pickle.dumps({"segments": [segment]}, protocol=4)


HOSTILE = {
    "self-referential.pickle": _self_referential,
    "shared-lists.pickle": _shared_lists,
    "shared-entries.pickle": _shared_entries,
    "memo-bomb.pickle": _memo_bomb,
    "colliding-keys.pickle": _colliding_keys,
    "colliding-set.pickle": _colliding_set,
    "huge-frame.pickle": _huge_frame_snapshot,
    "far-device.pickle": _snapshot_far_device,
    "stack-of-lists.jsonl": lambda: _jsonl(stack=[["x"]]),
    "stack-null.jsonl": lambda: _jsonl(stack=None),
    "stack-number.jsonl": lambda: _jsonl(stack=5),
    "far-device.jsonl": lambda: _jsonl(device=100_000_000),
    "huge-frame.jsonl": lambda: _jsonl(stack=["y" * 1_000_000 + ":1 in f"]),
    "bad-enums.jsonl": lambda: _jsonl(page="giant", memory=3, fallback="yes", api="free"),
    "bad-leaked.jsonl": lambda: (HEADER + "\n" + json.dumps(
        {"event": "reset", "leaked": [[1]]}) + "\n").encode(),
    "header-types.jsonl": lambda: (json.dumps(
        {"format": "ascend-memsim-trace", "version": 1, "product": 5, "hbm_bytes": "x",
         "device_count": [1]}) + "\n" + json.dumps(
        {"event": "malloc", "size": 64, "ptr": 64}) + "\n").encode(),
    "header-unknown-product.jsonl": lambda: (json.dumps(
        {"format": "ascend-memsim-trace", "version": 1, "product": "Z9"}) + "\n").encode(),
    "deep.jsonl": lambda: ("[" * 200_000 + "]" * 200_000 + "\n").encode(),
    "long-number.jsonl": lambda: _jsonl(size=int("9" * 4000)),
    "binary.jsonl": lambda: bytes(range(256)) * 40,
    "bad-columns.csv": lambda: (
        b"Thread,Time,Action,Pointer,Size,Stream,Api,Policy,Module\n"
        b"0,00:00:00.000001,allocate,0x1000,100,0,aclrtFree,0x0,33\n"
        b"0,00:00:00.000002,allocate,0x2000,100,0,aclrtMalloc,0x1ffffffff,33\n"
        b"0,00:00:00.000003,allocate,0x3000,100,0,aclrtMalloc,0x0,7\n"
        b"0,00:00:00.000004,allocate,0x4000,100,0,aclrtMalloc,zero,\n"),
    "json-snapshot.json": lambda: json.dumps({"segments": [
        {"device": 0, "address": 4096, "total_size": 512, "frames": [
            {"filename": {"a": 1}, "line": "x", "name": None}]}]}).encode(),
}

COMMANDS = {
    "stats": lambda path, out: ["stats", path, "--quiet"],
    "map": lambda path, out: ["map", path, "--quiet"],
    "replay": lambda path, out: ["replay", path, "--quiet"],
    "replay-bisect": lambda path, out: ["replay", path, "--quiet", "--bisect"],
    "plot": lambda path, out: ["plot", path, "--quiet", "-o", out + ".svg"],
    "export-memory-viz": lambda path, out: ["export", path, "--format", "memory-viz",
                                            "-o", out + ".pickle"],
    "export-rmm-csv": lambda path, out: ["export", path, "--format", "rmm-csv",
                                         "-o", out + ".csv"],
}


def _check(code: int, stdout: str, stderr: str, command: str) -> None:
    # replay's own status 1: the trace does not fit
    assert code in ((0, 1, 2) if command.startswith("replay") else (0, 2)), (code, stderr[-2000:])
    assert "Traceback" not in stderr
    # a file's problem is the file's, not an aclError
    assert "ACL_ERROR" not in stderr
    if code == 2:
        assert "error: " in stderr and len(stderr.strip()) > len("error: ")
    # no line printed runs on without bound (a frame is cut at 200 characters; a number
    # has at most the 4,300 digits Python reads)
    assert all(len(line) < 10_000 for line in (stdout + stderr).splitlines())


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_hostile_file_ends_in_output_or_a_message(tmp_path, capsys, name, command):
    path = tmp_path / name
    path.write_bytes(HOSTILE[name]())
    argv = COMMANDS[command](str(path), str(tmp_path / "out"))
    code, stdout, stderr, _ = run_bounded(argv, capsys)
    _check(code, stdout, stderr, command)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_file_that_is_not_a_regular_file_is_refused(tmp_path, capsys, command):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)     # opening it to read would wait for a writer forever
    for path in (str(fifo), os.devnull, str(tmp_path)) + (
            ("/dev/zero",) if os.path.exists("/dev/zero") else ()):
        code, _, stderr, _ = run_bounded(COMMANDS[command](path, str(tmp_path / "o")),
                                         capsys)
        assert code == 2, (path, stderr)
        assert "regular file" in stderr, stderr


def test_the_bad_fields_are_warnings_with_their_line_numbers(tmp_path, capsys):
    for name, field in (("stack-of-lists.jsonl", "'stack'"), ("stack-null.jsonl", "'stack'"),
                        ("far-device.jsonl", "device 100000000"),
                        ("bad-enums.jsonl", "'page'")):
        path = tmp_path / name
        path.write_bytes(HOSTILE[name]())
        code, stdout, stderr, _ = run_bounded(["stats", str(path), "--quiet"], capsys)
        assert code == 0 and f"warning: {path}:2: " in stderr and field in stderr, stderr
        # the bad malloc is left out; its free is then one of a pointer never allocated
        assert "0 mallocs" in stdout


def test_a_header_field_of_the_wrong_type_names_the_file(tmp_path, capsys):
    path = tmp_path / "header-types.jsonl"
    path.write_bytes(HOSTILE["header-types.jsonl"]())
    code, _, stderr, _ = run_bounded(["replay", str(path), "--quiet"], capsys)
    assert code == 0 and f"warning: {path}:1: header 'product' must be a string" in stderr
    path = tmp_path / "header-unknown-product.jsonl"
    path.write_bytes(HOSTILE["header-unknown-product.jsonl"]())
    code, _, stderr, _ = run_bounded(["replay", str(path), "--quiet"], capsys)
    assert code == 2 and f"{path}: the trace header names product 'Z9'" in stderr
    assert "--product" in stderr


def test_a_huge_stack_frame_is_cut_in_text_output(tmp_path, capsys):
    path = tmp_path / "huge-frame.jsonl"
    path.write_text(HEADER + "\n" + json.dumps(
        {"event": "malloc", "size": 100, "ptr": 4096, "stack": ["y" * 1_000_000]}) + "\n")
    code, stdout, _, _ = run_bounded(["stats", str(path), "--quiet"], capsys)
    assert code == 0
    assert "y" * 200 + "... (999800 more characters)" in stdout
    assert max(len(line) for line in stdout.splitlines()) < 400


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_dict_keyed_by_colliding_integers_is_refused_before_it_is_built(tmp_path, capsys,
                                                                         protocol):
    # every dict of a snapshot is keyed by strings (torch/cuda/memory.py _snapshot); the old
    # reader built this dict (quadratic in its keys) and the replay said it fits
    data = _colliding_keys(protocol)
    with pytest.raises(SnapshotError, match="a dict key that is not a string"):
        safe_unpickle(data)
    if protocol < 2:
        return   # no PROTO opcode: the commands do not take the file for a pickle
    path = tmp_path / "keys.pickle"
    path.write_bytes(data)
    code, stdout, stderr, _ = run_bounded(["replay", str(path), "--quiet"], capsys)
    assert code == 2 and "a dict key that is not a string" in stderr and "fits" not in stdout


def test_a_set_is_refused_before_it_is_built(tmp_path, capsys):
    with pytest.raises(SnapshotError, match="holds a set"):
        safe_unpickle(_colliding_set())
    # strings as keys, one named again through the memo, are what every snapshot holds
    entry = {"action": "alloc", "addr": 1, "size": 2, "stream": 0}
    assert safe_unpickle(pickle.dumps({"device_traces": [[entry, dict(entry)]]}, protocol=0)) \
        == {"device_traces": [[entry, entry]]}
