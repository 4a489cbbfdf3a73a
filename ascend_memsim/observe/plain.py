"""Plain data from files nobody vouches for: a restricted unpickler, and values in messages.

:func:`safe_unpickle` reads a pickle (a torch / torch_npu memory snapshot) into dicts, lists,
tuples, sets, strings, bytes and numbers only: every opcode that names a class or a function
is refused, and the work is bounded by the file's size (a memo index past the file and a
container that holds itself are refused; a container referred to a billion times is walked
once). :func:`brief` quotes such a value in a message in O(1).
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

__all__ = ["SnapshotError", "safe_unpickle", "brief"]


class SnapshotError(ValueError):
    """A file that is not a snapshot this module can read (message says what is wrong)."""


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


def _opcode_table() -> list[Any]:
    """For each opcode byte, how its argument is skipped: a fixed width (int), a length
    prefix (struct.Struct), newline-terminated lines (bytes: one per line), a memo store
    (str: its name), or None (not an opcode: the unpickler refuses it)."""
    import pickletools

    prefix = {-2: "<B", -3: "<i", -4: "<I", -5: "<Q"}
    table: list[Any] = [None] * 256
    for op in pickletools.opcodes:
        code, arg = op.code.encode("latin-1")[0], op.arg
        if op.name in ("PUT", "LONG_BINPUT", "STOP"):
            table[code] = op.name
        elif arg is None:
            table[code] = 0
        elif arg.n >= 0:
            table[code] = arg.n
        elif arg.n == -1:
            # GLOBAL and INST name a module and a class, one line each
            table[code] = b"\n\n" if op.name in ("GLOBAL", "INST") else b"\n"
        else:
            table[code] = struct.Struct(prefix[arg.n])
    return table


_OPCODES = _opcode_table()


def _check_memo(data: bytes) -> None:
    """Refuse a pickle that stores an object at a memo index beyond its own length.

    CPython's unpickler sizes its memo array by the largest index stored
    (``Modules/_pickle.c``, ``_Unpickler_MemoPut``): a 12-byte ``LONG_BINPUT 0x4000000`` takes
    a gigabyte. A pickler stores at most one object per opcode, so an index above the
    number of opcodes read is no pickler's. One pass over the opcodes, O(len(data)); the
    scan stops where the unpickler would fail anyway (an unknown opcode, a truncated
    argument), and class-naming opcodes are left to find_class.
    """
    table, size, unpack = _OPCODES, len(data), struct.unpack_from
    pos = ops = 0
    try:
        while pos < size:
            kind = table[data[pos]]
            pos += 1
            ops += 1
            if kind.__class__ is int:
                pos += kind
            elif kind.__class__ is struct.Struct:
                pos += kind.size + kind.unpack_from(data, pos)[0]
            elif kind.__class__ is bytes:
                for _ in kind:
                    pos = data.index(b"\n", pos) + 1
            elif kind == "STOP" or kind is None:
                return
            else:
                if kind == "PUT":
                    end = data.index(b"\n", pos)
                    index = int(data[pos:end]) if end - pos <= 20 else size + 1
                    pos = end + 1
                else:
                    index = unpack("<I", data, pos)[0]
                    pos += 4
                if index > ops:
                    raise SnapshotError(f"cannot read the pickle: it stores an object at "
                                        f"memo index {index}, beyond what a pickle of "
                                        f"{size} bytes holds (damaged or hostile)")
    except (ValueError, struct.error) as e:
        if isinstance(e, SnapshotError):
            raise
        # a truncated or malformed argument: the unpickler stops there too, with its message


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

    Time and memory O(len(data)): a memo index no pickler writes, a container holding
    itself, or more objects than the bytes can describe are refused.

    >>> safe_unpickle(pickle.dumps({"segments": [], "device_traces": [[]]}))
    {'segments': [], 'device_traces': [[]]}

    Raises:
        SnapshotError: the pickle is damaged, refers to a class or function, or holds
            anything but a tree of plain containers, strings and numbers.
    """
    _check_memo(data)
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
    if kind is str:
        return repr(value) if len(value) <= 60 else repr(value[:57]) + "..."
    if value is None or kind is bool or kind is float:
        return repr(value)
    size = len(value) if kind in (list, dict, tuple) else None
    return f"a {kind.__name__}" + ("" if size is None else
                                   f" of {size} item{'s' * (size != 1)}")
