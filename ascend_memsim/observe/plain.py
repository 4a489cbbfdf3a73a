"""Plain data from files nobody vouches for: a restricted unpickler, and values in messages.

:func:`safe_unpickle` reads a pickle (a torch / torch_npu memory snapshot) into dicts, lists,
tuples, sets, strings, bytes and numbers only: every opcode that names a class or a function
is refused, and the work is bounded by the file's size (a memo index past the file, a dict
key that is not a string, a set and a container that holds itself are refused; a container
referred to a billion times is walked once). :func:`brief` quotes such a value in a message in O(1).
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

__all__ = ["SnapshotError", "safe_unpickle", "brief", "WideInt"]


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
    """Builds dicts, lists, tuples, sets, str, bytes, numbers, bools and None; nothing else.

    Every opcode that names a class or a function (GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE,
    NEWOBJ, the extension registry) goes through find_class, which refuses; so does a
    persistent id.
    """

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"the pickle refers to {module}.{name}; a memory snapshot holds only plain "
            f"dicts, lists, strings and numbers, so it is not read")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("the pickle refers to a persistent object; not read")


_PLAIN = frozenset({str, int, float, bool, type(None)})
_CONTAINERS = frozenset({dict, list, tuple})


#: what an opcode does to the unpickler's stack, for :func:`_check_opcodes` (see there)
_PUSH, _POP_PUSH, _MARK, _TO_MARK, _SETITEM, _SETITEMS, _DICT, _PUT, _GET, _MEMOIZE, _DUP, \
    _STOP, _NOT_PLAIN, _SET, _FROZENSET, _NOTHING = range(16)
#: the type tags of the stack: a string (the only key a snapshot's dicts have), anything else
_STR, _OTHER = 1, 0
_STR_OPS = frozenset({"UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "STRING",
                      "BINSTRING", "SHORT_BINSTRING"})
#: opcodes that name a class or a function, or need an argument the unpickler is not given:
#: the unpickler refuses them where they stand, so the scan stops there
_REFUSED_OPS = frozenset({"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "EXT1", "EXT2", "EXT4",
                          "PERSID", "BINPERSID", "NEXT_BUFFER", "READONLY_BUFFER", "REDUCE",
                          "BUILD", "NEWOBJ", "NEWOBJ_EX"})
_SPECIAL = {"MARK": _MARK, "SETITEM": _SETITEM, "SETITEMS": _SETITEMS, "DICT": _DICT,
            "PUT": _PUT, "BINPUT": _PUT, "LONG_BINPUT": _PUT, "GET": _GET, "BINGET": _GET,
            "LONG_BINGET": _GET, "MEMOIZE": _MEMOIZE, "DUP": _DUP, "STOP": _STOP,
            "EMPTY_SET": _SET, "ADDITEMS": _SET, "FROZENSET": _FROZENSET}


def _opcode_table() -> list[Any]:
    """For each opcode byte, (how its argument is skipped, what it does to the stack, how
    many items it pops, the tag it pushes or None), or None (not an opcode: the unpickler
    refuses it). The argument: a fixed width (int), a length prefix (struct.Struct), or
    newline-terminated lines (bytes: one per line). The stack effect comes from pickletools'
    own description of each opcode."""
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
        before = [s.name for s in op.stack_before]
        if op.name in _SPECIAL:
            effect = _SPECIAL[op.name]
        elif op.name in _REFUSED_OPS:
            effect = _NOT_PLAIN
        elif "mark" in before:
            effect = _TO_MARK
        elif before:
            effect = _POP_PUSH
        else:   # PROTO and FRAME leave the stack as it is
            effect = _PUSH if op.stack_after else _NOTHING
        pops = before.index("mark") if "mark" in before else len(before)
        push = (_STR if op.name in _STR_OPS else _OTHER) if op.stack_after else None
        table[code] = (skip, effect, pops, push)
    return table


_OPCODES = _opcode_table()
_BINGET = pickle.BINGET[0]


def _check_opcodes(data: bytes) -> None:
    """Refuse, before anything is built, what would make unpickling cost more than the size.

    - A memo index beyond the pickle's own length: CPython's unpickler sizes its memo array
      by the largest index stored (``Modules/_pickle.c``, ``_Unpickler_MemoPut``), so a
      12-byte ``LONG_BINPUT 0x4000000`` takes a gigabyte; a pickler stores at most one
      object per opcode, so an index above the number of opcodes read is no pickler's.
    - A dict key that is not a string, and any set: inserting ``n`` keys that hash alike
      costs ``n**2`` (integers hash to themselves, so ``k * (2**61 - 1)`` all hash to 0: a
      1 MB pickle took minutes). A snapshot has neither: every dict of
      ``torch.cuda.memory._snapshot()`` (its TypedDicts ``Snapshot``, ``Segment``,
      ``Block``, ``Frame``, ``TraceEntry`` in ``torch/cuda/memory.py``) is keyed by
      strings, whose hashes Python salts per process.

    One pass over the opcodes that follows the unpickler's stack by type only (a string or
    not; the memo keeps each stored object's type): O(len(data)). The scan stops where the
    unpickler would fail anyway (an unknown opcode, a truncated argument, a stack that runs
    out) and at the opcodes that name a class, which find_class refuses.

    Raises:
        SnapshotError: one of the above, saying which.
    """
    table, size, unpack = _OPCODES, len(data), struct.unpack_from
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    memo_get = memo.get
    pos = ops = 0
    try:
        while pos < size:
            code = data[pos]
            if code == _BINGET:
                # nearly half of a snapshot's opcodes (its keys, named again)
                stack.append(memo_get(data[pos + 1], _OTHER))
                pos += 2
                ops += 1
                continue
            entry = table[code]
            if entry is None:
                return
            skip, effect, pops, push = entry
            start = pos = pos + 1
            ops += 1
            if skip.__class__ is int:
                pos += skip
            elif skip.__class__ is struct.Struct:
                pos += skip.size + skip.unpack_from(data, pos)[0]
            else:
                for _ in skip:
                    pos = data.index(b"\n", pos) + 1
            if pos > size:
                return
            if effect == _PUSH:
                stack.append(push)
            elif effect == _GET or effect == _PUT:
                if skip == 1:
                    index = data[start]
                elif skip == 4:
                    index = unpack("<I", data, start)[0]
                else:   # GET / PUT: a decimal line
                    index = int(data[start:pos - 1]) if pos - 1 - start <= 20 else size + 1
                if effect == _GET:
                    stack.append(memo.get(index, _OTHER))
                    continue
                if index > ops:
                    raise SnapshotError(f"cannot read the pickle: it stores an object at "
                                        f"memo index {index}, beyond what a pickle of "
                                        f"{size} bytes holds (damaged or hostile)")
                memo[index] = stack[-1]
            elif effect == _MARK:
                marks.append(len(stack))
            elif effect == _SETITEMS or effect == _DICT:
                mark = marks.pop()
                if _OTHER in stack[mark::2]:
                    raise _key_error()
                del stack[mark:]
                if effect == _DICT:
                    stack.append(_OTHER)
            elif effect == _TO_MARK:
                del stack[marks.pop():]
                if pops:
                    del stack[-pops:]
                if push is not None:
                    stack.append(push)
            elif effect == _POP_PUSH:
                if len(stack) < pops:
                    return
                del stack[-pops:]
                if push is not None:
                    stack.append(push)
            elif effect == _MEMOIZE:
                memo[len(memo)] = stack[-1]
            elif effect == _SETITEM:
                if stack[-2] != _STR:
                    raise _key_error()
                del stack[-2:]
            elif effect == _DUP:
                stack.append(stack[-1])
            elif effect == _NOTHING:
                continue
            elif effect == _SET or effect == _FROZENSET:
                kind = "set" if effect == _SET else "frozenset"
                raise SnapshotError(f"the pickle holds a {kind}; a memory snapshot holds only "
                                    f"dicts, lists, strings and numbers")
            else:   # STOP, or an opcode the unpickler refuses where it stands
                return
    except (ValueError, IndexError, struct.error) as e:
        if isinstance(e, SnapshotError):
            raise
        # a truncated or malformed argument, a stack or mark that runs out: the unpickler
        # stops there too, with its message


def _key_error() -> SnapshotError:
    return SnapshotError("the pickle holds a dict key that is not a string; every dict of a "
                         "memory snapshot is keyed by strings (damaged or hostile)")


def _check_plain(obj: Any, limit: int) -> None:
    """Refuse anything but dicts, lists, tuples, strings, numbers, bools and None (the
    unpickler also builds sets and bytes without naming a class), and containers that hold
    themselves. Exact types suffice: without find_class no subclass can be built.

    Each distinct container is walked once, however often it is referred to (a pickle's
    memo lets ``a = [a, a]`` repeated 40 times name 2**40 paths in 300 bytes), so the
    walk is O(distinct containers + their items), which a pickle of ``n`` bytes keeps
    below 2n; more than ``limit`` is refused.
    """
    plain, containers = _PLAIN, _CONTAINERS
    done: set[int] = set()        # containers checked with everything under them
    on_path: set[int] = set()     # containers being checked (their ancestors too)
    todo: list[tuple[Any, bool]] = [(obj, False)]
    walked = 0
    while todo:
        item, leaving = todo.pop()
        if leaving:
            on_path.discard(id(item))
            done.add(id(item))
            continue
        kind = type(item)
        if kind in plain:
            continue
        if kind not in containers:
            raise SnapshotError(f"the pickle holds a {kind.__name__}; a memory snapshot "
                                f"holds only dicts, lists, strings and numbers")
        ident = id(item)
        if ident in done:
            continue
        if ident in on_path:
            raise SnapshotError(f"the pickle holds a {kind.__name__} that contains itself; "
                                f"a memory snapshot is a tree of plain data")
        walked += 1 + len(item)
        if walked > limit:
            raise SnapshotError(f"the pickle holds more objects than a pickle of its size "
                                f"can ({limit}); damaged or hostile")
        on_path.add(ident)
        todo.append((item, True))
        if kind is dict:
            todo.extend([(k, False) for k in item if type(k) not in plain])
            todo.extend([(v, False) for v in item.values() if type(v) not in plain])
        else:
            todo.extend([(v, False) for v in item if type(v) not in plain])


def safe_unpickle(data: bytes) -> Any:
    """The plain object pickled in ``data``; never imports or calls anything.

    Time and memory O(len(data)): a memo index no pickler writes, a dict key that is not
    a string or a set (whose hashing an adversary controls), a container holding
    itself, or more objects than the bytes can describe are refused.

    >>> safe_unpickle(pickle.dumps({"segments": [], "device_traces": [[]]}))
    {'segments': [], 'device_traces': [[]]}

    Raises:
        SnapshotError: the pickle is damaged, refers to a class or function, or holds
            anything but a tree of plain containers, strings and numbers.
    """
    _check_opcodes(data)
    try:
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise SnapshotError(f"cannot read the pickle: {e}") from None
    except RecursionError:
        raise SnapshotError("cannot read the pickle: nested too deeply") from None
    except Exception as e:  # a damaged pickle raises EOFError, KeyError, IndexError, ...
        raise SnapshotError(f"cannot read the pickle (damaged or truncated?): "
                            f"{type(e).__name__}: {e}") from None
    _check_plain(obj, 2 * len(data) + 16)
    return obj


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
