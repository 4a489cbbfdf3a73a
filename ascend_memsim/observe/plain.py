"""Plain data from files nobody vouches for: a restricted unpickler, and values in messages.

:func:`safe_unpickle` reads a pickle (a torch / torch_npu memory snapshot) into dicts, lists,
tuples, strings and numbers only: every opcode that names a class or a function is refused,
and one pass over the opcodes, before anything is built, bounds the time and the memory by
the file's size (a memo index past the file, a dict key that is not a string, a set, bytes,
a container that would hold itself, and a pickle whose objects would take more than
:data:`MEMORY_FACTOR` times its size are refused). :func:`brief` quotes such a value in a
message in O(1).
"""

from __future__ import annotations

import io
import pickle
import struct
import sys
from array import array
from itertools import repeat
from typing import Any

__all__ = ["SnapshotError", "safe_unpickle", "brief", "WideInt", "MEMORY_FACTOR",
           "MEMORY_SLACK"]

#: DECISION: the most memory reading a pickle may take, as a multiple of its size: what
#: :func:`safe_unpickle` builds and what the unpickler holds while building it (its stack,
#: marks and memo), priced opcode by opcode before anything is built (:func:`_scan`; the
#: price is never below what the load takes, ``benchmarks/bench_hostile_memory.py`` measures
#: both). Besides: the file's own bytes, and :data:`MEMORY_SLACK`. A snapshot torch writes
#: prices at 4 to 12 times its size (keys and frames named again through the memo cost 2
#: bytes each and nothing new); a pickle of a million empty lists in a million bytes would
#: take 80 times (``]`` is one byte, a list 56 and its place 8 more): refused.
MEMORY_FACTOR = 24
#: bytes any read may take beside the factor (the unpickler's read-ahead; a small pickle)
MEMORY_SLACK = 1 << 20


class SnapshotError(ValueError):
    """A file that is not a snapshot this module can read (message says what is wrong)."""


class WideInt:
    """An integer of a JSON file with more digits than any 64-bit integer has, left unread
    (Python reads at most 4,300 digits, in time quadratic in their number), so that the
    reader can name the field that holds it (:func:`ascend_memsim.observe.snapshot.loads_json`)."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings, numbers, bools and None once :func:`_scan` has
    passed the pickle; refuses, again, whatever names a class or a function (GLOBAL,
    STACK_GLOBAL, INST and the extension registry go through find_class) and a persistent
    id.
    """

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"the pickle refers to {module}.{name}; a memory snapshot holds only plain "
            f"dicts, lists, strings and numbers, so it is not read")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("the pickle refers to a persistent object; not read")


# -- the scan: the unpickler's stack followed by kind, before anything is built ---------------
#
# An object on the scan's stack (and in its memo) is one int: ``serial << 2 | kind``, the
# serial numbering lists and dicts (the containers an opcode can add to) from 1, 0 for the
# rest. What each opcode does is CPython's unpickler's (Modules/_pickle.c, ``load_*``), down
# to the topmost mark as a fence no opcode pops through (``Pdata_stack_underflow``).

_OTHER, _STR, _LIST, _DICT = range(4)

#: what an opcode does, for :func:`_scan`
(_PUSH, _STRING, _NUMBER, _EMPTY_LIST, _EMPTY_DICT, _MARK, _LIST_OP, _TUPLE, _DICT_OP,
 _TUPLE_N, _APPEND, _APPENDS, _SETITEM, _SETITEMS, _POP, _POP_MARK, _DUP, _GET, _PUT,
 _MEMOIZE, _FRAME, _NOTHING, _STOP, _CLASS, _REFUSED, _HOLDS) = range(26)

#: prices, in bytes this Python's objects take (sys.getsizeof: with the garbage collector's
#: header); a pointer is 8
_LIST_SIZE = sys.getsizeof([])
_TUPLE_SIZE = sys.getsizeof(())
#: a list's item as it grows: its pointer and the eighth a list grows by; the first brings 4
_LIST_ITEM = 9
_LIST_FIRST = 4 * 8
#: an int or a float (an int of up to 60 bits: 32; a float: 24)
_NUMBER_SIZE = 32
#: a string's header (compact ASCII; any other kind's is at most this)
_ASCII_SIZE = sys.getsizeof("")
_STR_SIZE = sys.getsizeof("\U0001f600") + 4
#: the unpickler's stack (a pointer a place, grown an eighth at a time), its marks and its
#: memo (both grown by doubling): bytes a place at its largest
_STACK_PLACE = 10
_MARK_PLACE = 16
_MEMO_PLACE = 16


def _dict_sizes() -> tuple[list[int], int]:
    """How big a dict of ``n`` string keys is (as sys.getsizeof counts it), as it grows by
    one key at a time, for ``n`` up to 4096; and the most bytes a key costs beyond."""
    grown: dict[str, None] = {}
    sizes = [sys.getsizeof(grown)]
    for n in range(1, 4097):
        grown[str(n)] = None
        sizes.append(sys.getsizeof(grown))
    # past the table it doubles alike (Objects/dictobject.c: to thrice its keys, two
    # thirds of it entries): the bytes a key just after it grew, at the most, and 6 more
    # past 2**16 places, where an index takes 4 bytes, not 2
    per_key = max(-(-size // n) for n, size in enumerate(sizes) if n >= 64) + 6
    return sizes, per_key


_DICT_BY_KEYS, _DICT_KEY = _dict_sizes()
_DICT_TABLE = len(_DICT_BY_KEYS)


def _dict_size(n: int) -> int:
    """The bytes a dict of ``n`` string keys takes (as sys.getsizeof counts it). O(1)."""
    return _DICT_BY_KEYS[n] if n < _DICT_TABLE else _DICT_KEY * n

_HOLDS_WHAT = {"BINBYTES": "bytes", "SHORT_BINBYTES": "bytes", "BINBYTES8": "bytes",
               "BYTEARRAY8": "bytearray", "EMPTY_SET": "set", "ADDITEMS": "set",
               "FROZENSET": "frozenset", "NEXT_BUFFER": "buffer",
               "READONLY_BUFFER": "buffer"}
_EFFECTS = {
    "INT": _NUMBER, "LONG": _NUMBER, "FLOAT": _NUMBER, "LONG1": _NUMBER, "LONG4": _NUMBER,
    "BININT": _PUSH, "BININT1": _PUSH, "BININT2": _PUSH, "BINFLOAT": _PUSH, "NONE": _PUSH,
    "NEWTRUE": _PUSH, "NEWFALSE": _PUSH, "EMPTY_TUPLE": _PUSH,
    "STRING": _STRING, "BINSTRING": _STRING, "SHORT_BINSTRING": _STRING,
    "UNICODE": _STRING, "SHORT_BINUNICODE": _STRING, "BINUNICODE": _STRING,
    "BINUNICODE8": _STRING,
    "EMPTY_LIST": _EMPTY_LIST, "EMPTY_DICT": _EMPTY_DICT, "MARK": _MARK, "LIST": _LIST_OP,
    "TUPLE": _TUPLE, "DICT": _DICT_OP, "TUPLE1": _TUPLE_N, "TUPLE2": _TUPLE_N,
    "TUPLE3": _TUPLE_N, "APPEND": _APPEND, "APPENDS": _APPENDS, "SETITEM": _SETITEM,
    "SETITEMS": _SETITEMS, "POP": _POP, "POP_MARK": _POP_MARK, "DUP": _DUP,
    "GET": _GET, "BINGET": _GET, "LONG_BINGET": _GET,
    "PUT": _PUT, "BINPUT": _PUT, "LONG_BINPUT": _PUT, "MEMOIZE": _MEMOIZE,
    "FRAME": _FRAME, "PROTO": _NOTHING, "STOP": _STOP,
    "GLOBAL": _CLASS, "INST": _CLASS, "STACK_GLOBAL": _CLASS,
    "REDUCE": _REFUSED, "BUILD": _REFUSED, "OBJ": _REFUSED, "NEWOBJ": _REFUSED,
    "NEWOBJ_EX": _REFUSED, "EXT1": _REFUSED, "EXT2": _REFUSED, "EXT4": _REFUSED,
    "PERSID": _REFUSED, "BINPERSID": _REFUSED, **dict.fromkeys(_HOLDS_WHAT, _HOLDS),
}
#: the price of an opcode that pushes a number, None, a bool or the empty tuple (the ints
#: 0-255 and the rest are shared, never made)
_PUSH_PRICE = {"BININT": _NUMBER_SIZE, "BININT2": _NUMBER_SIZE, "BINFLOAT": _NUMBER_SIZE}


def _opcode_table() -> list[Any]:
    """For each opcode byte, (its name, how its argument is skipped, what it does, a number
    it needs: a price, or how many a TUPLEn takes), or None (not an opcode: the unpickler
    refuses it). The argument: a fixed width (int), a length prefix (struct.Struct), or
    newline-terminated lines (bytes: one per line), as pickletools describes each."""
    import pickletools

    prefix = {-2: "<B", -3: "<i", -4: "<I", -5: "<Q"}
    table: list[Any] = [None] * 256
    for op in pickletools.opcodes:
        code, arg = op.code.encode("latin-1")[0], op.arg
        if arg is None:
            skip: Any = 0
        elif arg.n >= 0:
            skip = arg.n
        elif arg.n == -1:
            # GLOBAL and INST name a module and a class, one line each
            skip = b"\n\n" if op.name in ("GLOBAL", "INST") else b"\n"
        else:
            skip = struct.Struct(prefix[arg.n])
        extra = int(op.name[-1]) if op.name.startswith("TUPLE") and op.name != "TUPLE" \
            else _PUSH_PRICE.get(op.name, 0)
        table[code] = (op.name, skip, _EFFECTS[op.name], extra)
    return table


_OPCODES = _opcode_table()
_BINGET, _MEMOIZE_CODE, _MARK_CODE, _BININT1, _EMPTY_DICT_CODE = (
    pickle.BINGET[0], pickle.MEMOIZE[0], pickle.MARK[0], pickle.BININT1[0],
    pickle.EMPTY_DICT[0])
_EMPTY_DICT_SIZE = sys.getsizeof({})


def _scan(data: bytes, *, factor: float | None = None) -> int:
    """The price of unpickling ``data`` (bytes, see below); refuse, before anything is built,
    what would make unpickling it cost more than its size allows, or build anything but a
    tree (or a DAG) of plain data.

    One pass over the opcodes that follows the unpickler's stack by kind (a string, a list,
    a dict, anything else) and each list's and dict's identity and length, as CPython's
    unpickler runs them. Refused:

    - An opcode that builds bytes, a bytearray, a set or a buffer, or calls or builds an
      object (REDUCE, BUILD, NEWOBJ, ...: BUILD with None does nothing in CPython, so a scan
      that stopped there, trusting the unpickler to fail, would let what follows through).
    - A memo index beyond the pickle's own length: CPython's unpickler sizes its memo array
      by the largest index stored (``_Unpickler_MemoPut``), so a 12-byte
      ``LONG_BINPUT 0x4000000`` takes a gigabyte; a pickler stores at most one object per
      opcode, so an index above the number of opcodes read is no pickler's.
    - A dict key that is not a string: inserting ``n`` keys that hash alike costs ``n**2``
      (integers hash to themselves, so ``k * (2**61 - 1)`` all hash to 0: a 1 MB pickle
      took minutes). A snapshot has none: every dict of ``torch.cuda.memory._snapshot()``
      (its TypedDicts ``Snapshot``, ``Segment``, ``Block``, ``Frame``, ``TraceEntry`` in
      ``torch/cuda/memory.py``) is keyed by strings, whose hashes Python salts per process.
    - An item added to a list or dict that the pickle has named again (the memo's GET, or
      DUP) since it was made: only then can the item reach it, so only a container that
      holds itself does this (a pickler adds every item before it names the container
      again; a list or dict shared by many, as torch shares frame lists, is fine).
    - A pickle whose objects, with the unpickler's stack, marks and memo at their largest
      and the largest passing copy (a slice being appended, a dict's old table as it grows,
      a long string's bytes), would take more than :data:`MEMORY_FACTOR` times its size
      (plus :data:`MEMORY_SLACK`): each opcode is priced at what CPython allocates for it,
      at the most.

    The scan stops where the unpickler stops (STOP, an unknown opcode, an argument cut
    short, a stack or memo that runs out, a class named: find_class refuses it), having
    priced all the unpickler will run. O(len(data)) time; memory at most 20 bytes an opcode
    (its stack, marks, memo and counts as arrays of 8-byte ints), under the limit too.
    ``factor``: the limit's, if not :data:`MEMORY_FACTOR` (to price what it would refuse).

    Raises:
        SnapshotError: one of the above, saying which.
    """
    table, size = _OPCODES, len(data)
    stack, marks, memo = array("q"), array("q"), array("q")
    # per list or dict (by serial, from 1): named again since it was made; how many items
    fetched, counts = bytearray(1), array("q", [0])
    serial = filled = fence = deep = marks_deep = price = spike = pos = ops = 0
    memo_len = 0
    try:
        while pos < size:
            code = data[pos]
            # the commonest opcodes of a snapshot first: its keys and frames named again
            # (nearly half), the memo, marks and small numbers
            if code == _BINGET:
                index = data[pos + 1]
                if index >= memo_len or memo[index] < 0:
                    break
                got = memo[index]
                if got & 2:
                    fetched[got >> 2] = 1
                stack.append(got)
                pos += 2
                ops += 1
                continue
            if code == _MEMOIZE_CODE and len(stack) > fence and filled == memo_len:
                memo.append(stack[-1])
                filled = memo_len = filled + 1
                pos += 1
                ops += 1
                continue
            if code == _MARK_CODE:
                fence = len(stack)
                marks.append(fence)
                if len(marks) > marks_deep:
                    marks_deep = len(marks)
                pos += 1
                ops += 1
                continue
            if code == _BININT1:
                stack.append(_OTHER)
                pos += 2
                ops += 1
                continue
            if code == _EMPTY_DICT_CODE:
                serial += 1
                fetched.append(0)
                counts.append(0)
                stack.append(serial << 2 | _DICT)
                price += _EMPTY_DICT_SIZE
                pos += 1
                ops += 1
                continue
            entry = table[code]
            if entry is None:
                break
            name, skip, effect, extra = entry
            if effect >= _REFUSED:  # whatever its argument says (BINBYTES8's may be 2**63)
                raise _refusal(name, effect)
            start = pos = pos + 1
            ops += 1
            if skip.__class__ is int:
                pos += skip
            elif skip.__class__ is struct.Struct:
                start = pos + skip.size
                pos = start + skip.unpack_from(data, pos)[0]
            else:
                for _ in skip:
                    pos = data.index(b"\n", pos) + 1
            if pos > size:
                break
            if effect == _PUSH:
                stack.append(_OTHER)
                price += extra
            elif effect == _STRING:
                stack.append(_STR)
                length = pos - start
                # UTF-8 all ASCII: a byte a character; else at most 4 (one character past
                # Latin-1 makes each 4), and while it decodes, its bytes read and a narrower
                # copy
                if name in _UTF8 and data[start:pos].isascii():
                    price += _ASCII_SIZE + length
                    spike = max(spike, length)
                else:
                    price += _STR_SIZE + 4 * length
                    spike = max(spike, 2 * length)
            elif effect == _NUMBER:
                stack.append(_OTHER)
                price += _NUMBER_SIZE + 2 * (pos - start)
            elif effect == _EMPTY_LIST or effect == _EMPTY_DICT:
                serial += 1
                fetched.append(0)
                counts.append(0)
                if effect == _EMPTY_LIST:
                    stack.append(serial << 2 | _LIST)
                    price += _LIST_SIZE
                else:
                    stack.append(serial << 2 | _DICT)
                    price += _EMPTY_DICT_SIZE
            elif effect == _MARK:
                fence = len(stack)
                marks.append(fence)
                if len(marks) > marks_deep:
                    marks_deep = len(marks)
            elif effect == _APPEND or effect == _SETITEM:
                # the target below the item (and the key): above the fence
                taken = 1 if effect == _APPEND else 2
                if len(stack) - taken <= fence:
                    break
                deep = max(deep, len(stack))
                if effect == _SETITEM and stack[-2] & 3 != _STR:
                    raise _key_error()
                target = stack[-1 - taken]
                kind = _LIST if effect == _APPEND else _DICT
                if target & 3 != kind or fetched[target >> 2]:
                    raise _cannot_add(target, kind, fetched, name)
                del stack[-taken:]
                number = target >> 2
                before = counts[number]
                counts[number] = before + 1
                if kind == _LIST:
                    price += _LIST_ITEM + (_LIST_FIRST if not before else 0)
                else:
                    size_after = _dict_size(before + 1)
                    price += size_after - _dict_size(before)
                    spike = max(spike, size_after // 2)
            elif effect == _TUPLE_N:
                if len(stack) - extra < fence:
                    break
                deep = max(deep, len(stack))
                del stack[-extra:]
                stack.append(_OTHER)
                price += _TUPLE_SIZE + 8 * extra
            elif effect == _GET or effect == _PUT:
                if skip == 1:
                    index = data[start]
                elif skip == 4:
                    index = struct.unpack_from("<I", data, start)[0]
                else:   # GET / PUT: a decimal line
                    index = int(data[start:pos - 1]) if pos - 1 - start <= 20 else size + 1
                if effect == _GET:
                    if not 0 <= index < memo_len or memo[index] < 0:
                        break
                    got = memo[index]
                    if got & 2:
                        fetched[got >> 2] = 1
                    stack.append(got)
                    continue
                if len(stack) <= fence or index < 0:
                    break
                if index > ops:
                    raise SnapshotError(f"cannot read the pickle: it stores an object at "
                                        f"memo index {index}, beyond what a pickle of "
                                        f"{size} bytes holds (damaged or hostile)")
                if index >= memo_len:
                    memo.extend(repeat(-1, index + 1 - memo_len))
                    memo_len = len(memo)
                filled += memo[index] < 0
                memo[index] = stack[-1]
            elif effect == _MEMOIZE:
                # CPython's memo_len: the entries filled, whatever their indices
                if len(stack) <= fence:
                    break
                if filled >= memo_len:
                    memo.extend(repeat(-1, filled + 1 - memo_len))
                    memo_len = len(memo)
                if memo[filled] < 0:
                    memo[filled] = stack[-1]
                    filled += 1
                else:
                    memo[filled] = stack[-1]
            elif effect == _DUP:
                if len(stack) <= fence:
                    break
                got = stack[-1]
                if got & 2:
                    fetched[got >> 2] = 1
                stack.append(got)
            elif effect == _POP:
                if marks and marks[-1] == len(stack):   # POP takes a mark off the top first
                    marks.pop()
                    fence = marks[-1] if marks else 0
                elif len(stack) <= fence:
                    break
                else:
                    stack.pop()
            elif effect in _TO_MARK:
                if not marks:
                    break
                mark = marks.pop()
                fence = marks[-1] if marks else 0
                deep = max(deep, len(stack))
                count = len(stack) - mark
                if effect == _SETITEMS:
                    if mark <= fence:
                        break
                    if count:
                        if count % 2:
                            break
                        for key in stack[mark::2]:
                            if key & 3 != _STR:
                                raise _key_error()
                        target = stack[mark - 1]
                        if target & 3 != _DICT or fetched[target >> 2]:
                            raise _cannot_add(target, _DICT, fetched, name)
                        number = target >> 2
                        before = counts[number]
                        counts[number] = after = before + count // 2
                        if after < _DICT_TABLE:
                            size_after = _DICT_BY_KEYS[after]
                            price += size_after - _DICT_BY_KEYS[before]
                        else:
                            size_after = _dict_size(after)
                            price += size_after - _dict_size(before)
                        # as it grows, its old table (half as big) for a moment
                        if size_after > 2 * spike:
                            spike = size_after // 2
                    del stack[mark:]
                elif effect == _APPENDS:
                    if mark <= fence:
                        break
                    if count:
                        target = stack[mark - 1]
                        if target & 3 != _LIST or fetched[target >> 2]:
                            raise _cannot_add(target, _LIST, fetched, name)
                        number = target >> 2
                        price += _LIST_ITEM * count + (_LIST_FIRST if not counts[number]
                                                       else 0)
                        counts[number] += count
                        # the slice it adds, a list of its own for a moment
                        spike = max(spike, _LIST_SIZE + 8 * count)
                    del stack[mark:]
                elif effect == _POP_MARK:
                    del stack[mark:]
                elif effect == _TUPLE:
                    del stack[mark:]
                    stack.append(_OTHER)
                    price += _TUPLE_SIZE + 8 * count if count else 0
                else:   # LIST, DICT: a new container of the items
                    if effect == _DICT_OP:
                        if count % 2:
                            break
                        for key in stack[mark::2]:
                            if key & 3 != _STR:
                                raise _key_error()
                    del stack[mark:]
                    serial += 1
                    fetched.append(0)
                    if effect == _LIST_OP:
                        counts.append(count)
                        stack.append(serial << 2 | _LIST)
                        price += _LIST_SIZE + 8 * count
                    else:
                        counts.append(count // 2)
                        stack.append(serial << 2 | _DICT)
                        price += _dict_size(count // 2)
                        spike = max(spike, _dict_size(count // 2) // 2)
            elif effect == _FRAME:
                # the unpickler reads the whole frame ahead
                spike = max(spike, min(struct.unpack_from("<Q", data, start)[0], size - pos))
            elif effect == _NOTHING:
                continue
            else:   # STOP, or a class named (find_class refuses it where it stands)
                break
    except (ValueError, IndexError, struct.error) as e:
        if isinstance(e, SnapshotError):
            raise
        # a truncated or malformed argument: the unpickler stops there too, with its message
    deep = max(deep, len(stack))
    price += (_STACK_PLACE * deep + _MARK_PLACE * marks_deep + _MEMO_PLACE * memo_len
              + spike)
    if factor is None:
        factor = MEMORY_FACTOR
    if price > factor * size + MEMORY_SLACK:
        raise SnapshotError(f"cannot read the pickle: its {size} bytes would make objects "
                            f"of about {price} bytes, more than {factor} times its size (no "
                            f"snapshot does; damaged or hostile)")
    return price


_TO_MARK = frozenset((_APPENDS, _SETITEMS, _POP_MARK, _LIST_OP, _TUPLE, _DICT_OP))
#: the string opcodes whose bytes are UTF-8 (the others escape, or are protocol 0 and 1's)
_UTF8 = frozenset(("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"))


def _cannot_add(target: int, kind: int, fetched: bytearray, name: str) -> SnapshotError:
    """Why an opcode may not add to ``target`` (a stack entry): not a container of ``kind``
    (CPython's unpickler fails too), or one the pickle has named again since it made it."""
    what = "list" if kind == _LIST else "dict"
    if target & 3 != kind:
        return SnapshotError(f"cannot read the pickle: {name} adds to something that is not "
                             f"a {what} (damaged or hostile)")
    return SnapshotError(f"the pickle holds a {what} that contains itself (or adds to it "
                         f"after naming it again); a memory snapshot is a tree of plain data")


def _refusal(name: str, effect: int) -> SnapshotError:
    if effect == _HOLDS:
        return SnapshotError(f"the pickle holds a {_HOLDS_WHAT[name]}; a memory snapshot holds "
                             f"only dicts, lists, strings and numbers")
    return SnapshotError(f"the pickle calls or builds an object ({name}); a memory snapshot "
                         f"holds only dicts, lists, strings and numbers")


def _key_error() -> SnapshotError:
    return SnapshotError("the pickle holds a dict key that is not a string; every dict of a "
                         "memory snapshot is keyed by strings (damaged or hostile)")


def safe_unpickle(data: bytes) -> Any:
    """The plain object pickled in ``data``; never imports or calls anything.

    Time O(len(data)); memory at most :data:`MEMORY_FACTOR` times ``len(data)`` (plus
    :data:`MEMORY_SLACK`) besides ``data``: :func:`_scan` prices and checks every opcode
    before the unpickler runs, so a memo index no pickler writes, a dict key that is not a
    string, a set or bytes, a container holding itself, or more objects than the bytes may
    make are refused, and anything else is a tree (or a DAG) of plain data.

    >>> safe_unpickle(pickle.dumps({"segments": [], "device_traces": [[]]}))
    {'segments': [], 'device_traces': [[]]}

    Raises:
        SnapshotError: the pickle is damaged, refers to a class or function, holds
            anything but a tree of plain containers, strings and numbers, or would take
            more memory than its size allows.
    """
    _scan(data)
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise SnapshotError(f"cannot read the pickle: {e}") from None
    except RecursionError:
        raise SnapshotError("cannot read the pickle: nested too deeply") from None
    except Exception as e:  # a damaged pickle raises EOFError, KeyError, IndexError, ...
        raise SnapshotError(f"cannot read the pickle (damaged or truncated?): "
                            f"{type(e).__name__}: {e}") from None


def brief(value: Any) -> str:
    """``value`` for a message, in at most about 60 characters and O(1) time, whatever it
    is (a 100 MB string, an integer of a million digits, a list shared a billion times).
    For a file's data; an argument of a call is shown by :func:`ascend_memsim.memory.args.shown`,
    which takes the whole repr."""
    kind = type(value)
    if kind is int:
        return repr(value) if value.bit_length() <= 200 else \
            f"an integer of {value.bit_length()} bits"
    if kind is WideInt:
        return repr(value)
    if kind is str:
        return repr(value) if len(value) <= 60 else repr(value[:57]) + "..."
    if value is None or kind is bool or kind is float:
        return repr(value)
    size = len(value) if kind in (list, dict, tuple) else None
    return f"a {kind.__name__}" + ("" if size is None else
                                   f" of {size} item{'s' * (size != 1)}")
