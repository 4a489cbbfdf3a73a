"""Memory that hostile input can make this process take, as a multiple of the input's size.

Run: ``python benchmarks/bench_hostile_memory.py [--quick]`` (several minutes; ``--quick``
uses smaller inputs). Three tables, the input itself never counted:

1. A worker's frame as the owner reads it (``remote.wire.receive`` on a socket pair, a
   thread sending), tracemalloc's peak (Python's allocations): each shape of JSON at the
   value limit (``MAX_VALUES``), or at the frame limit (``MAX_MESSAGE``, 64 MiB) when it
   holds few values. Target: peak <= 6n + 64v (``n`` bytes, ``v`` values), so at most
   7 x 64 MiB; a frame over a limit refused before it is parsed.
2. A snapshot pickle as ``safe_unpickle`` reads it (the reader of ``replay``, ``map``,
   ``stats`` and the study grid): snapshots torch and this project write, and hostile shapes
   padded to just under the price limit, or refused. Each in a fresh process: its peak RSS
   over the RSS before the call (Linux: the high-water mark reset first, /proc/self/
   clear_refs; tracemalloc slows the scan sixtyfold), beside the scan's price. Target:
   peak <= price <= 24 x the size (``observe.plain.MEMORY_FACTOR``; plus 1 MiB).
3. ``ascend-memsim replay`` end to end on snapshots, likewise (the reader, then what replay
   makes of what it read: its events, its problems), for scale.
"""

from __future__ import annotations

import io
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable
from typing import Any

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from multiprocessing import connection as mpc

from ascend_memsim.observe import plain
from ascend_memsim.remote import wire

MiB = 1 << 20


def peak_of(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` (or the exception it raised) and the most bytes it had allocated at once."""
    tracemalloc.start()
    try:
        result: Any = fn()
    except Exception as e:  # the refusal is the result
        result = e
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, peak


# -- 1. frames ------------------------------------------------------------------------------------

def _call(items: bytes) -> bytes:
    """A call whose argument list holds ``items`` (JSON text of the values, comma-separated)."""
    return b'{"D":[["call",{"L":[' + items + b']}]]}'


def _repeat(unit: bytes, values_each: int, *, limit: int = wire.MAX_VALUES) -> bytes:
    """``unit`` repeated as many times as the value limit allows (``values_each`` a copy)."""
    return _call(b",".join([unit] * ((limit - 16) // values_each)))


def frames(quick: bool) -> list[tuple[str, bytes]]:
    big = 8 * MiB if quick else wire.MAX_MESSAGE - 4096
    limit = wire.MAX_VALUES // 8 if quick else wire.MAX_VALUES
    pairs = b",".join(b'["k%06d",1e1]' % i for i in range((limit - 16) // 3))
    return [
        ("tagged empty lists {\"L\":[]}", _repeat(b'{"L":[]}', 4, limit=limit)),
        ("tagged empty dicts {\"D\":[]}", _repeat(b'{"D":[]}', 4, limit=limit)),
        ("raw empty arrays []", _repeat(b"[]", 2, limit=limit)),
        ("floats 1e1", _repeat(b"1e1", 1, limit=limit)),
        ("2-character strings", _repeat(b'"ab"', 1, limit=limit)),
        ("dict pairs [str, float]", b'{"D":[["call",1],["args",{"D":[' + pairs + b"]}]]}"),
        ("one string, one 4-byte character", _call(b'"\\ud83d\\ude00' + b"a" * big + b'"')),
        ("bytes (base64): the honest largest",
         _call(b'{"B":"' + b"QUJD" * (big // 4) + b'"}')),
        ("over the value limit (refused)", _repeat(b"0", 1, limit=wire.MAX_VALUES + 64)),
    ]


def receive_peak(data: bytes) -> tuple[Any, int]:
    """``wire.receive`` of ``data`` sent as one frame by another thread."""
    ours, theirs = socket.socketpair()
    conn = mpc.Connection(ours.detach())
    header = struct.pack("!i", len(data))

    def send() -> None:
        try:
            theirs.sendall(header)
            theirs.sendall(data)
        except OSError:  # the reader closed
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        return peak_of(lambda: wire.receive(conn))
    finally:
        conn.close()  # a sender still sending (the frame refused, or not read) stops
        sender.join()
        theirs.close()


def table_frames(quick: bool) -> None:
    print("1. a worker's frame, read by the owner (wire.receive)")
    print(f"{'shape':36}{'frame MiB':>10}{'values':>10}{'peak MiB':>10}{'x frame':>9}"
          f"{'B/value*':>10}{'bound ok':>10}")
    for name, data in frames(quick):
        count = wire.values(data)
        result, peak = receive_peak(data)
        size = len(data)
        if isinstance(result, Exception):
            print(f"{name:36}{size / MiB:10.1f}{count:10,}{peak / MiB:10.1f}{peak / size:8.2f}x"
                  f"{'':>10}  refused: {str(result)[:50]}")
            continue
        per_value = max(0, peak - 6 * size) / count
        ok = peak <= 6 * size + 64 * count
        print(f"{name:36}{size / MiB:10.1f}{count:10,}{peak / MiB:10.1f}{peak / size:8.2f}x"
              f"{per_value:10.1f}{'yes' if ok else 'NO':>10}")
        del result
    print("* bytes a value beyond 6 bytes a byte of the frame; the bound: 6n + 64v\n")


# -- 2. snapshot pickles --------------------------------------------------------------------------

P = b"\x80\x04"


def torch_like(entries: int) -> dict:
    """A snapshot shaped as torch writes it: trace entries and segments whose frame lists,
    and frames, are shared (torch/csrc/profiler/combined_traceback.cpp, py_symbolize)."""
    frames = [{"filename": f"/site-packages/torch/nn/modules/m{i}.py", "line": 100 + i,
               "name": f"forward_{i % 40}"} for i in range(400)]
    stacks = [[frames[(7 * s + d) % 400] for d in range(24)] for s in range(60)]
    base = 0x7F0000000000
    actions = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free")
    trace = [{"action": actions[i % 5], "addr": base + (i // 5) * 2 * MiB,
              "size": 512 * (1 + i % 77), "stream": 0, "time_us": 1_700_000_000_000 + i,
              "frames": stacks[i % 60]} for i in range(entries)]
    segments = [{"device": 0, "address": base + i * 2 * MiB, "total_size": 2 * MiB,
                 "allocated_size": 512, "active_size": 512, "requested_size": 500,
                 "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                 "is_expandable": False, "frames": stacks[i % 60],
                 "blocks": [{"address": base + i * 2 * MiB, "size": 512,
                             "requested_size": 500, "state": "active_allocated",
                             "frames": stacks[(i + 1) % 60]}]}
                for i in range(entries // 20)]
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}


def project_export(events: int) -> bytes:
    from ascend_memsim.observe.snapshot import memory_viz_bytes
    return memory_viz_bytes(
        {"event": "malloc", "size": 512 * (i % 50 + 1), "ptr": 4096 * (i + 1), "device": 0,
         "stack": [f"train.py:{j} in step" for j in range(10)]} for i in range(events))


def _padded(unit: bytes, count: int, head: bytes = b"") -> bytes:
    """A list of ``head`` and ``count`` copies of ``unit`` (opcodes that each push one
    object), with an ASCII string beside them just long enough to bring the price under the
    limit: a byte of it prices 1 (its character) and 1 (the bytes it is read from, beside
    the largest such), and allows 24."""
    def made(pad: int) -> bytes:
        return P + b"](" + head + unit * count + b"X" + struct.pack("<I", pad) + b"p" * pad \
            + b"e."

    bare = made(0)
    over = _price_of(bare) - plain.MEMORY_FACTOR * len(bare) - plain.MEMORY_SLACK
    data = made(max(0, over // (plain.MEMORY_FACTOR - 2) + 4096))
    plain._scan(data)  # under the limit
    return data


def _price_of(data: bytes) -> int:
    """What unpickling ``data`` costs, as the scan prices it (past the limit too)."""
    return plain._scan(data, factor=float("inf"))


def pickles(quick: bool) -> list[tuple[str, bytes]]:
    n = 200_000 if quick else 1_000_000
    entries = 20_000 if quick else 100_000
    return [
        ("torch-like snapshot, protocol 4", pickle.dumps(torch_like(entries), protocol=4)),
        ("torch-like snapshot, protocol 2", pickle.dumps(torch_like(entries), protocol=2)),
        ("this project's export (memory_viz)", project_export(entries)),
        ("empty lists ] (before: 160x)", P + b"](" + b"]" * n + b"e."),
        ("empty dicts } (before: 168x)", P + b"](" + b"}" * n + b"e."),
        ("one list named again, DUP (before: 80x)", P + b"](]" + b"2" * n + b"e."),
        ("lists of one list ]]a (before: 106x)", P + b"](" + b"]]a" * (n // 3) + b"e."),
        ("empty lists, padded to the limit", _padded(b"]", n)),
        ("empty dicts, padded to the limit", _padded(b"}", n)),
        ("DUP of a list, padded to the limit", _padded(b"2", n, head=b"]")),
        ("ints 257-65535, padded", _padded(b"M\x01\x02", n // 3)),
        ("floats, padded", _padded(b"G" + bytes(8), n // 9)),
        ("1-key dicts {\"a\": 1}, padded", _padded(b"}\x8c\x01aK\x01s", n // 6)),
        ("strings with a 4-byte character",
         P + b"](" + (b"\x8c\x08" + "abcd😀".encode()) * (n // 10) + b"e."),
    ]


def rss_peak(run: Callable[[], Any]) -> int | None:
    """Bytes this process's RSS rose to while ``run()`` ran, over its RSS before (Linux
    only: None elsewhere)."""
    def status(field: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
        raise OSError(field)

    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the high-water mark from here
        before = status("VmRSS:")
    except OSError:
        return None
    try:
        run()
    except Exception:  # a refusal: what it took until then
        pass
    return status("VmHWM:") - before


def child(table: str, path: str) -> None:
    """In a fresh process: the input in the file at ``path``, read by ``table``'s reader;
    prints its peak RSS (over the RSS with the input read) and what became of it."""
    if table == "pickles":
        with open(path, "rb") as f:
            data = f.read()

        def run() -> Any:
            return plain.safe_unpickle(data)
    else:
        import importlib

        from ascend_memsim.cli import main as cli

        # the modules replay imports when it first runs are not the input's
        for name in ("cli.traces", "observe.replay", "observe.trace", "observe.snapshot",
                     "observe.tensor_replay", "allocators"):
            importlib.import_module("ascend_memsim." + name)
        sys.stderr = io.StringIO()  # its warnings, one a problem

        def run() -> Any:
            return cli(["replay", path, "--quiet"], out=io.StringIO())
    # the first call: a second would reuse what the first let go, unseen by RSS
    peak = rss_peak(run)
    try:
        verdict = "exit " + str(run()) if table != "pickles" else (run() and "read")
    except plain.SnapshotError as e:
        verdict = "refused: " + str(e)[:40]
    print(f"{peak} {verdict}")


def in_child(table: str, data: bytes) -> tuple[int | None, str]:
    """Peak RSS and outcome of ``table``'s reader on ``data``, in a fresh process."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "input.pickle")
        with open(path, "wb") as f:
            f.write(data)
        out = subprocess.run([sys.executable, __file__, "--child", table, path],
                             capture_output=True, text=True, check=True).stdout.split(None, 1)
    return None if out[0] == "None" else int(out[0]), out[1].strip()


def table_pickles(quick: bool) -> None:
    print(f"2. a snapshot pickle, read by safe_unpickle (limit: {plain.MEMORY_FACTOR} x its "
          f"size + {plain.MEMORY_SLACK // MiB} MiB), each in a fresh process")
    print(f"{'pickle':44}{'MiB':>7}{'price x':>9}{'RSS x':>8}  result")
    for name, data in pickles(quick):
        size, price = len(data), _price_of(data)
        peak, verdict = in_child("pickles", data)
        shown = "-" if peak is None else f"{peak / size:.1f}x"
        print(f"{name:44}{size / MiB:7.1f}{price / size:8.1f}x{shown:>8}  {verdict}")
    print()


# -- 3. replay end to end -------------------------------------------------------------------------

def replays(quick: bool) -> list[tuple[str, bytes]]:
    n = 50_000 if quick else 300_000
    # protocol 2: memo indices by BINPUT; the entry stored again at 1, then named n times
    entry = pickle.dumps({"action": "segment_alloc", "addr": 1 << 40, "size": 512,
                          "stream": 0, "frames": []}, protocol=2)[2:-1]
    named_again = (P + b"}\x8c\x0ddevice_traces]](" + entry + b"q\x01" + b"h\x01" * n
                   + b"eas.")
    one = (b"}(\x8c\x06device\x94K\x00\x8c\x07address\x94J\x00\x00\x00\x01"
           b"\x8c\x0atotal_size\x94M\x00\x02u")
    again = b"}(h\x00K\x00h\x01J\x00\x00\x00\x01h\x02M\x00\x02u"
    segments = P + b"}\x8c\x08segments](" + one + again * n + b"es."
    return [
        ("torch-like snapshot, protocol 4", pickle.dumps(torch_like(n // 10), protocol=4)),
        ("one entry named again (a problem each)", named_again),
        ("segments of 19 bytes each (an event each)", segments),
    ]


def table_replays(quick: bool) -> None:
    print("3. ascend-memsim replay, end to end (the reader, then what replay builds), each in "
          "a fresh process")
    print(f"{'snapshot':44}{'MiB':>7}{'price x':>9}{'RSS x':>8}  result")
    for name, data in replays(quick):
        size, price = len(data), _price_of(data)
        peak, verdict = in_child("replays", data)
        shown = "-" if peak is None else f"{peak / size:.1f}x"
        print(f"{name:44}{size / MiB:7.1f}{price / size:8.1f}x{shown:>8}  {verdict}")
    print()


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    if "--child" in argv:
        at = argv.index("--child")
        child(argv[at + 1], argv[at + 2])
        return
    table_frames(quick)
    table_pickles(quick)
    table_replays(quick)


if __name__ == "__main__":
    main(sys.argv[1:])
