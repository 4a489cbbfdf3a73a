"""Memory that hostile input takes, bounded by its size (docs/internals/security.md): a
worker's frame as the owner reads it (ascend_memsim.remote.wire), a snapshot pickle as the
restricted unpickler reads it (ascend_memsim.observe.plain.safe_unpickle).

Peaks are tracemalloc's (the objects built and what builds them; the input not counted),
checked against the stated bounds; what is refused is refused before it is built (the
builder, patched to fail, is never reached). benchmarks/bench_hostile_memory.py runs the same
shapes at full size.
"""

from __future__ import annotations

import io
import pickle
import socket
import struct
import threading
import time
import tracemalloc
from multiprocessing import connection as mpc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_memsim.observe import plain
from ascend_memsim.observe.plain import MEMORY_FACTOR, MEMORY_SLACK, SnapshotError, safe_unpickle
from ascend_memsim.remote import wire

MiB = 1 << 20


def _peak(fn, *args):
    """``fn(*args)`` and the most bytes it allocated at once."""
    tracemalloc.start()
    try:
        result = fn(*args)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- a worker's frame ------------------------------------------------------------------------------

def _call(items: bytes) -> bytes:
    return b'{"D":[["call",{"L":[' + items + b']}]]}'


def _received(data: bytes):
    """``wire.receive`` of ``data`` sent as one frame by another thread, and its peak."""
    ours, theirs = socket.socketpair()
    conn = mpc.Connection(ours.detach())
    sender = threading.Thread(target=_send, args=(theirs, struct.pack("!i", len(data)) + data),
                              daemon=True)
    sender.start()
    try:
        return _peak(wire.receive, conn, time.monotonic() + 60)
    finally:
        conn.close()  # a sender still sending (the frame refused, or not read) stops
        sender.join()
        theirs.close()


def _send(sock, data):
    try:
        sock.sendall(data)
    except OSError:  # the reader closed
        pass


def test_a_frame_over_the_value_limit_is_refused_before_it_is_parsed(monkeypatch):
    # issue 27: one 60 MiB frame of small JSON values took the owner to 2.35 GB
    monkeypatch.setattr(wire, "_DECODER", None, raising=False)  # parsing would fail here
    frame = _call(b",".join([b"0"] * wire.MAX_VALUES))  # 2 MiB of "0,"
    with pytest.raises(wire.TooBig, match=f"values is over the limit of {wire.MAX_VALUES}"):
        wire.unpack(frame)
    # and pack refuses what unpack would, so an honest sender splits (or says ValueError)
    with pytest.raises(wire.TooBig, match="values"):
        wire.pack({"call": "rt.memcpy_batch", "args": [[0] * wire.MAX_VALUES]})


# each shape: (the text of one value, characters a value, values counted a value, bytes a
# value once read at the most): a list is 56 bytes and its place in its list 8; a dict 64;
# a float 24; a 2-character str 51; a [str, float] pair its list (56 + 2 x 8), the str
# (58), the float (24) and its place in the dict (up to 44)
SHAPES = {
    "raw empty arrays": (b"[]", 3, 2, 56 + 8),
    "tagged empty lists": (b'{"L":[]}', 9, 4, 56 + 8),
    "tagged empty dicts": (b'{"D":[]}', 9, 4, 64 + 8),
    "floats": (b"1e1", 4, 1, 24 + 8),
    "2-character strings": (b'"ab"', 5, 1, 51 + 8),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reading_a_frame_of_small_values_takes_at_most_6n_plus_64_bytes_a_value(shape):
    unit, chars, counted, cost = SHAPES[shape]
    count = 100_000
    frame = _call(b",".join([unit] * count))
    message, peak = _received(frame)
    assert len(message["call"]) == count
    # around the values, {"D":[["call",{"L":[ and ]}]]}: 25 characters, counting 8 (two {,
    # two :, three [, one ,) and one; between them count - 1 commas
    values = wire.values(frame)
    assert values == count * counted - 1 + 8 + 1
    n = len(frame)
    assert n == count * chars - 1 + 25
    # what the values take (cost a value) is within the bound by construction: cost <=
    # 6 x chars + 64 x counted; the peak holds them and the text
    assert cost <= 6 * chars + 64 * counted
    assert peak <= 6 * n + 64 * values, (peak, n, values)


def test_reading_dict_pairs_and_long_strings_holds_the_bound():
    pairs = b",".join(b'["k%06d",1e1]' % i for i in range(100_000))
    wide = _call(b'"\\ud83d\\ude00' + b"a" * (4 * MiB) + b'"')  # one character makes all 4
    base64 = _call(b'{"B":"' + b"QUJD" * MiB + b'"}')
    for frame in (b'{"D":[["call",1],["args",{"D":[' + pairs + b"]}]]}", wide, base64):
        _, peak = _received(frame)
        assert peak <= 6 * len(frame) + 64 * wire.values(frame), (peak, len(frame))
    # the string: 4 bytes a character (16 MiB) beside the text (4 MiB); the bytes: 3 MiB
    # beside the text: both at most 6 times the frame
    _, peak = _received(base64)
    assert peak <= 4 * len(base64)


def test_a_frame_outside_ascii_is_refused_and_honest_text_is_escaped():
    with pytest.raises(wire.WireError, match="outside ASCII"):
        wire.unpack('{"D":[["call","é"]]}'.encode())
    message = {"call": "é😀", "args": ["\x00"]}
    assert wire.pack(message).isascii() and wire.unpack(wire.pack(message)) == message


def test_the_depth_limit_reads_as_it_writes(monkeypatch):
    # a message is depth 0, its values 1: a value 16 deep crosses, 17 does not, both ways
    for depth in range(13, 19):
        value = None
        for _ in range(depth - 1):
            value = [value]
        try:
            data = wire.pack({"a": value})
            sent = True
        except wire.WireError:
            sent = False
        monkeypatch.setattr(wire, "MAX_DEPTH", 100)
        data = wire.pack({"a": value})
        monkeypatch.undo()
        try:
            read = wire.unpack(data) == {"a": value}
        except wire.WireError:
            read = False
        assert sent == read == (depth <= wire.MAX_DEPTH), depth


def test_a_json_array_inside_a_tagged_form_reads_as_a_list():
    # DECISION (wire module docstring): json makes the array before any hook sees it, so
    # refusing it saves nothing; it reads as what it plainly is
    assert wire.unpack(b'{"D":[["a",{"L":[[1,2],{"T":[[3]]}]}]]}') == {"a": [[1, 2], ([3],)]}
    for bad in (b'{"D":[["a",{}]]}', b'{"D":[["a",{"L":[],"T":[]}]]}', b'{"D":[["a",{"L":1}]]}',
                b'{"D":[["a",{"X":[]}]]}', b'{"D":[[["k"],1]]}', b'{"D":[["a",{"B":"!"}]]}'):
        with pytest.raises(wire.WireError):
            wire.unpack(bad)


# -- a snapshot pickle -----------------------------------------------------------------------------

P = b"\x80\x04"


class _NeverBuilt:
    def __init__(self, *args):
        raise AssertionError("the unpickler ran on a pickle the scan should have refused")


@pytest.mark.parametrize("unit", [b"]", b"}", b"]]a", b"(l", b"}\x8c\x01aK\x01s"])
def test_a_pickle_of_a_million_small_containers_is_refused_before_it_is_built(unit,
                                                                              monkeypatch):
    # issue 27: a 5 MB pickle took 1.39 GB in replay (280 times). "]" is one byte and makes
    # a list of 56 bytes, 10 more on the unpickler's stack: 66 a byte, past 24
    monkeypatch.setattr(plain, "_PlainUnpickler", _NeverBuilt)
    data = P + b"](" + unit * (MiB // len(unit)) + b"e."
    with pytest.raises(SnapshotError, match=f"more than {MEMORY_FACTOR} times its size"):
        safe_unpickle(data)


@pytest.mark.parametrize("after", [
    b"r" + struct.pack("<I", 1 << 24),                                     # a memo bomb
    b"}(" + b"".join(b"\x8a\x08" + struct.pack("<q", k * ((1 << 61) - 1)) + b"N"
                     for k in range(1, 5)) + b"u",                          # colliding keys
    b"\x8f",                                                                # a set
])
def test_build_with_none_hides_nothing_that_follows(after, monkeypatch):
    # BUILD with None does nothing in CPython: a scan that stopped at BUILD (trusting the
    # unpickler to refuse it) let whatever followed through
    monkeypatch.setattr(plain, "_PlainUnpickler", _NeverBuilt)
    with pytest.raises(SnapshotError, match=r"calls or builds an object \(BUILD\)"):
        safe_unpickle(b"\x80\x02]Nb" + after + b".")


def test_bytes_are_refused_before_their_length_is_taken(monkeypatch):
    monkeypatch.setattr(plain, "_PlainUnpickler", _NeverBuilt)
    # CPython allocates BINBYTES8's length before it reads (load_counted_binbytes)
    for op, what in ((b"\x8e", "bytes"), (b"\x96", "bytearray")):
        with pytest.raises(SnapshotError, match=f"holds a {what};"):
            safe_unpickle(P + op + struct.pack("<Q", 1 << 40) + b"x.")


def _padded(unit: bytes, count: int, head: bytes = b"") -> bytes:
    """``count`` copies of ``unit`` in a list, with an ASCII string just long enough to
    bring the pickle under the limit: a byte of it prices 1 (its character) and 1 (the bytes
    it is read from, beside the largest such), and allows 24."""
    def made(pad: int) -> bytes:
        return P + b"](" + head + unit * count + b"X" + struct.pack("<I", pad) + b"p" * pad \
            + b"e."

    bare = made(0)
    over = plain._scan(bare, factor=float("inf")) - MEMORY_FACTOR * len(bare) - MEMORY_SLACK
    data = made(max(0, over // (MEMORY_FACTOR - 2) + 4096))
    plain._scan(data)  # under the limit
    return data


@pytest.mark.parametrize("unit, head", [
    (b"]", b""), (b"}", b""), (b"2", b"]"), (b"]]a", b""), (b"}\x8c\x01aK\x01s", b""),
    (b"M\x01\x02", b""), (b"\x8c\x08" + "abcd😀".encode(), b""),
])
def test_reading_a_pickle_takes_at_most_24_times_its_size(unit, head):
    data = _padded(unit, MiB // len(unit), head)
    price = plain._scan(data)
    assert price <= MEMORY_FACTOR * len(data) + MEMORY_SLACK
    # the price bounds what the load takes (the unpickler's own few kilobytes aside); the
    # scan before it, untraced here (tracemalloc slows it sixtyfold), takes less
    obj, peak = _peak(plain._PlainUnpickler(io.BytesIO(data)).load)
    assert isinstance(obj, list)
    assert peak <= price + 64 * 1024, (peak, price)


@pytest.mark.parametrize("unit", [b"]", b"(", b"]\x94", b"}2", b"K\x01"])
def test_the_scan_takes_at_most_20_bytes_an_opcode(unit):
    # its stack, marks, memo and item counts are arrays of 8-byte ints (a sixteenth to
    # spare as they grow), a byte a container: "]" is pushed (8.5) and counted (8.5 + 1.1)
    data = P + b"](" + unit * (64 * 1024 // len(unit)) + b"e."
    _, peak = _peak(lambda: plain._scan(data, factor=float("inf")))
    assert peak <= 20 * len(data) + 4096, peak / len(data)


def _torch_like(entries: int) -> dict:
    """A snapshot as torch writes it: frame lists and frames shared among entries
    (torch/csrc/profiler/combined_traceback.cpp, py_symbolize)."""
    frames = [{"filename": f"/torch/nn/modules/m{i}.py", "line": 10 + i, "name": f"f{i % 9}"}
              for i in range(200)]
    stacks = [[frames[(7 * s + d) % 200] for d in range(20)] for s in range(40)]
    actions = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free")
    trace = [{"action": actions[i % 5], "addr": (1 << 40) + (i // 5) * MiB, "size": 512 * i,
              "stream": 0, "time_us": 1_700_000_000_000 + i, "frames": stacks[i % 40]}
             for i in range(entries)]
    segments = [{"device": 0, "address": (1 << 40) + i * MiB, "total_size": MiB,
                 "stream": 0, "segment_pool_id": (0, 0), "is_expandable": False,
                 "frames": stacks[i % 40], "blocks": [{"address": (1 << 40) + i * MiB,
                                                       "size": 512, "state": "inactive",
                                                       "frames": []}]}
                for i in range(entries // 20)]
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}


def test_honest_snapshots_keep_half_the_limit_to_spare():
    from ascend_memsim.observe.snapshot import memory_viz_bytes

    snapshot = _torch_like(5_000)
    export = memory_viz_bytes(
        {"event": "malloc", "size": 512 * (i % 50 + 1), "ptr": 4096 * (i + 1), "device": 0,
         "stack": [f"train.py:{j} in step" for j in range(10)]} for i in range(5_000))
    for data in [pickle.dumps(snapshot, protocol=p) for p in range(6)] + [export]:
        assert plain._scan(data) <= MEMORY_FACTOR / 2 * len(data)
        assert safe_unpickle(data) == pickle.loads(data)


# a pickle of plain data, shared parts named again by the memo, then a few opcodes put in
# where they may break it: whatever the scan passes is plain, a tree or a DAG, and costs
# no more than its price
_HOSTILE = [b"2", b"0", b"1", b"(", b"a", b"e", b"s", b"u", b"b", b"N", b"\x94", b"h\x00",
            b"h\x01", b"h\x02", b"q\x00", b"q\x01", b"]", b"}", b"\x85", b"t", b"l", b"d",
            b"R", b"\x8c\x01k", b"K\x01", b"\x8f", b"C\x01x"]
_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) \
    | st.text(max_size=4)
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=2), inner, max_size=4)
                       | st.tuples(inner, inner), max_leaves=12)


def _plain_and_acyclic(obj, path=()):
    kind = type(obj)
    if kind in (str, int, float, bool, type(None)):
        return True
    assert kind in (list, tuple, dict), kind
    assert id(obj) not in path, "a container that holds itself"
    items = list(obj.items()) if kind is dict else obj
    for item in items:
        for part in (item if kind is dict else (item,)):
            _plain_and_acyclic(part, (*path, id(obj)))
    return True


@given(_VALUES, _VALUES, st.integers(0, 5),
       st.lists(st.tuples(st.floats(0, 1), st.sampled_from(_HOSTILE)), max_size=4))
def test_whatever_the_scan_passes_is_plain_acyclic_and_within_its_price(a, b, protocol, put):
    value = [a, b, a, [b, a]]   # parts named again
    data = pickle.dumps(value, protocol=protocol)
    if not put:
        assert safe_unpickle(data) == value
    ops = [data[:2], data[2:-1], data[-1:]]
    for where, op in put:
        ops.insert(1 + int(where * (len(ops) - 1)), op)
    data = b"".join(ops)
    try:
        price = plain._scan(data)
    except SnapshotError:
        return
    try:
        obj, peak = _peak(plain._PlainUnpickler(io.BytesIO(data)).load)
    except Exception:  # the unpickler's own refusal (a stack run out, a class)
        return
    assert _plain_and_acyclic(obj)
    assert peak <= price + 8 * 1024
