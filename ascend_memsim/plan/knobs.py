"""The knobs of a job's plan: the axes a search turns and where each value goes, as text a
user types (``micro_batch=1..256``, ``ZERO=1,2,3``, ``ds.json`` ``zero_optimization.stage=2``),
checked before any run.

An **axis** has a name and values: a monotone one (``NAME=LO..HI``, every whole number in
the range, searched by bisection) or a grid one (``NAME=a,b,c``). A value reaches the run
through ``{NAME}`` placeholders in the command's words, in an environment variable's value
or in a config file's key, and through the estimate's own options (the product, the
capacity, the world size). ``{{NAME}}`` is a literal ``{NAME}``; other braces (a JSON
argument) are left alone.

A **config file's key** is set in a copy of the file (JSON, YAML through PyYAML, TOML),
written by the cell in a folder of its own; the command's word naming the file is pointed
at the copy. The copy's bytes are made here, in the planning process, so a worker needs no
YAML or TOML library and reads no config file.

Nothing here runs a process or imports torch.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import importlib
import json
import math
import os
import re
import stat
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..memory.constants import MiB
from ..memory.errors import InvalidArgument

__all__ = ["Axis", "EnvKnob", "KeyKnob", "ConfigFile", "parse_vary", "parse_grid",
           "parse_env", "parse_key", "split_values", "placeholders", "substitute", "shown_value",
           "load_config", "set_key", "dump_config", "typed_value", "file_sha256",
           "files_named", "NAME", "MAX_VALUES", "MAX_CONFIG_BYTES", "ALLOC_CONF_NAMES",
           "INPUT_SUFFIXES"]

#: an axis's name: a Python identifier, dots allowed (a config key path names its axis)
NAME = r"[A-Za-z_][A-Za-z0-9_.]*"
_NAME = re.compile(NAME)
_PLACEHOLDER = re.compile(r"\{\{(" + NAME + r")\}\}|\{(" + NAME + r")\}")
#: DECISION: the most values one grid axis takes (each multiplies the plan's cells)
MAX_VALUES = 1000
#: DECISION: a config file is a few kilobytes of settings; a larger one is refused unread
MAX_CONFIG_BYTES = 4 * MiB
#: the bounds of a monotone axis's range (a value is passed as text; these keep it a number
#: every tool reads)
_RANGE_LIMIT = 2 ** 62
#: environment variables whose values hold commas: their lists are separated by ';' only
ALLOC_CONF_NAMES = ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}
#: the files of a command whose bytes key its answers (see :func:`files_named`)
INPUT_SUFFIXES = (".py", ".json", ".yaml", ".yml", ".toml")


@dataclass(frozen=True)
class Axis:
    """One axis of a plan: ``name`` and its grid ``values`` (text, as typed), or the range
    ``low..high`` of a monotone one (``values`` empty)."""

    name: str
    values: tuple[str, ...] = ()
    low: int | None = None
    high: int | None = None

    @property
    def monotone(self) -> bool:
        return self.low is not None

    def __len__(self) -> int:
        if self.low is not None and self.high is not None:
            return self.high - self.low + 1
        return len(self.values)


@dataclass(frozen=True)
class EnvKnob:
    """An environment variable of every cell: a fixed ``template`` (placeholders allowed;
    None: unset), its own grid axis (``axis``, named as the variable), or, ``literal``, the
    value this process's environment holds, taken as it is."""

    name: str
    template: str | None = None
    axis: Axis | None = None
    literal: bool = False


@dataclass(frozen=True)
class KeyKnob:
    """A config file's key set in each cell's copy: ``path`` into the file's data (a key per
    part; an int part indexes a list), set from ``template`` or from its own grid axis
    (``axis``, named as the key path as typed)."""

    file: str
    path: tuple[str, ...]
    text: str
    template: str | None = None
    axis: Axis | None = None


@dataclass(frozen=True)
class ConfigFile:
    """A config file as read once: its path as typed, its format, its data and the SHA-256
    of its bytes."""

    path: str
    format: str
    data: Any
    sha256: str


def _name(text: str, what: str) -> str:
    name = text.strip()
    if not _NAME.fullmatch(name):
        raise InvalidArgument(f"{what}: {name[:60]!r} is not a name (letters, digits, '_' "
                              f"and '.', not starting with a digit)")
    return name


def split_values(text: str, name: str) -> tuple[str, ...]:
    """The values of a list as typed: separated by ';' when the text holds one (or always,
    for :data:`ALLOC_CONF_NAMES`, whose values hold commas), else by ','; each stripped.

    DECISION: ',' separates values as in the rest of the command line (``--products
    A2,A3``); a value that holds a comma (an allocator setting,
    ``expandable_segments:True,max_split_size_mb:128``) is written in a ';' list, as the
    study's ``--settings`` takes them. An empty value is kept (``';expandable_segments:True'``
    is the default setting and one other).

    >>> split_values("1,2, 4", "x"), split_values("a,b;c", "x")
    (('1', '2', '4'), ('a,b', 'c'))

    Raises:
        InvalidArgument: more than :data:`MAX_VALUES` values, or a value given twice.
    """
    sep = ";" if ";" in text or name in ALLOC_CONF_NAMES else ","
    values = tuple(v.strip() for v in text.split(sep))
    if len(values) > MAX_VALUES:
        raise InvalidArgument(f"{name}: {len(values):,} values, more than the {MAX_VALUES} "
                              f"an axis takes")
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise InvalidArgument(f"{name}: the value {v[:60]!r} is given twice")
        seen.add(v)
    return values


def parse_vary(text: str) -> Axis:
    """A monotone axis from ``NAME=LO..HI`` (whole numbers, LO <= HI).

    >>> parse_vary("micro_batch=1..256")
    Axis(name='micro_batch', values=(), low=1, high=256)

    Raises:
        InvalidArgument: not of that form, or a range out of order or beyond +-2**62.
    """
    name, sep, rest = text.partition("=")
    low, dots, high = rest.partition("..")
    if not sep or not dots:
        raise InvalidArgument(f"--vary {text[:80]!r}: expected NAME=LO..HI, e.g. "
                              f"micro_batch=1..256")
    name = _name(name, "--vary")
    try:
        lo, hi = int(low.strip(), 10), int(high.strip(), 10)
    except ValueError:
        raise InvalidArgument(f"--vary {text[:80]!r}: LO and HI are whole numbers") from None
    if not -_RANGE_LIMIT <= lo <= hi <= _RANGE_LIMIT:
        raise InvalidArgument(f"--vary {name}: the range {lo}..{hi} is not LO <= HI within "
                              f"+-2**62")
    return Axis(name, (), lo, hi)


def parse_grid(text: str) -> Axis:
    """A grid axis from ``NAME=a,b,c`` (see :func:`split_values`).

    >>> parse_grid("stage=1,2,3").values
    ('1', '2', '3')

    Raises:
        InvalidArgument: not of that form; a bad name; too many or repeated values.
    """
    name, sep, rest = text.partition("=")
    if not sep:
        raise InvalidArgument(f"--grid {text[:80]!r}: expected NAME=a,b,c")
    name = _name(name, "--grid")
    return Axis(name, split_values(rest, name))


def parse_env(text: str, environ: Mapping[str, str] | None = None) -> EnvKnob:
    """An environment knob: ``NAME=a,b`` (its own axis), ``NAME=VALUE`` (fixed; placeholders
    allowed), or ``NAME`` (its value in ``environ``, this process's environment by default,
    kept with the cells' answers; unset there: unset in every cell).

    Raises:
        InvalidArgument: a bad name, too many or repeated values.
    """
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise InvalidArgument(f"--env {text[:80]!r}: {name[:60]!r} is not an environment "
                              f"variable's name")
    if not sep:
        value = (os.environ if environ is None else environ).get(name)
        return EnvKnob(name, value, literal=True)
    values = split_values(rest, name)
    if len(values) == 1:
        return EnvKnob(name, values[0])
    return EnvKnob(name, None, Axis(name, values))


def parse_key(file: str, text: str) -> KeyKnob:
    """A config key knob: ``KEY.PATH=a,b`` (its own axis, named ``KEY.PATH``) or
    ``KEY.PATH=VALUE`` (fixed; placeholders allowed) in ``file``.

    DECISION: a key path is dot-separated (``zero_optimization.stage``); a part that is a
    whole number indexes a list; a key holding a dot cannot be named.

    Raises:
        InvalidArgument: no ``=``, an empty part, too many or repeated values.
    """
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InvalidArgument(f"--set {file} {text[:80]!r}: expected KEY.PATH=VALUES, e.g. "
                              f"train_micro_batch_size_per_gpu=4")
    parts = tuple(key.split("."))
    if any(not p for p in parts):
        raise InvalidArgument(f"--set {file} {key[:80]!r}: a key path of dot-separated "
                              f"keys, none empty")
    values = split_values(rest, key)
    if len(values) == 1:
        return KeyKnob(file, parts, key, values[0])
    return KeyKnob(file, parts, key, None, Axis(_name(key, "--set"), values))


def shown_value(name: str, value: str) -> str:
    """An axis's value for a person: an empty one is ``(default)`` for an allocator setting
    (the default conf), else ``(empty)``.

    >>> shown_value("PYTORCH_NPU_ALLOC_CONF", ""), shown_value("x", ""), shown_value("x", "4")
    ('(default)', '(empty)', '4')
    """
    if value:
        return value
    return "(default)" if name in ALLOC_CONF_NAMES else "(empty)"


def placeholders(text: str) -> list[str]:
    """The axis names ``text`` refers to by ``{NAME}`` (not ``{{NAME}}``), in order.

    >>> placeholders("--micro-batch={mb} {{literal}} {\\"a\\": 1}")
    ['mb']
    """
    return [m.group(2) for m in _PLACEHOLDER.finditer(text) if m.group(2)]


def substitute(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{NAME}`` replaced by ``values[NAME]`` and ``{{NAME}}`` by
    ``{NAME}``. Time O(len(text) + the values put in).

    >>> substitute("--mb {mb} {{mb}}", {"mb": "8"})
    '--mb 8 {mb}'

    Raises:
        KeyError: a name ``values`` does not hold (the plan checks every name first).
    """
    def put(m: re.Match[str]) -> str:
        return "{" + m.group(1) + "}" if m.group(1) else values[m.group(2)]

    return _PLACEHOLDER.sub(put, text)


# -- config files ----------------------------------------------------------------------------

def _optional(name: str, why: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ImportError(why) from None


def _toml() -> ModuleType:
    try:
        return importlib.import_module("tomllib")
    except ImportError:
        return _optional("tomli", "a TOML config file needs Python 3.11's tomllib or, on "
                                  "Python 3.10, tomli: pip install tomli")


def _yaml() -> ModuleType:
    return _optional("yaml", "a YAML config file needs PyYAML: pip install pyyaml")


def _read_bounded(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``.

    Raises:
        InvalidArgument: missing, not a regular file (a FIFO is opened without waiting),
            unreadable or larger than ``limit``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InvalidArgument(f"{what} {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgument(f"{what} {path} is not a regular file")
        if st.st_size > limit:
            raise InvalidArgument(f"{what} {path} is {st.st_size:,} bytes, more than the "
                                  f"{limit // MiB} MiB a config file may be")
        parts, left = [], limit + 1
        while left > 0:
            part = os.read(fd, min(left, 1 << 20))
            if not part:
                break
            parts.append(part)
            left -= len(part)
    except OSError as e:
        raise InvalidArgument(f"{what} {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) > limit:
        raise InvalidArgument(f"{what} {path} grew past {limit // MiB} MiB while read")
    return data


def load_config(path: str, cwd: str | None = None) -> ConfigFile:
    """The config file at ``path`` (relative to ``cwd``), read and parsed: ``.json``,
    ``.yaml``/``.yml`` (PyYAML) or ``.toml``; its top level must be a mapping. Time and
    memory O(its size), at most :data:`MAX_CONFIG_BYTES`.

    Raises:
        InvalidArgument: another extension, a file that cannot be read, is too large, does
            not parse, or whose top level is not a mapping (the message names it).
        ImportError: YAML without PyYAML, TOML on Python 3.10 without tomli.
    """
    fmt = _FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise InvalidArgument(f"--set {path}: a config file is .json, .yaml, .yml or .toml")
    full = os.path.join(cwd or os.getcwd(), path)
    data = _read_bounded(full, MAX_CONFIG_BYTES, "--set")
    try:
        text = data.decode("utf-8")
        if fmt == "json":
            value = json.loads(text)
        elif fmt == "yaml":
            yaml = _yaml()
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise ValueError(str(e)) from None
        else:
            value = _toml().loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidArgument(f"--set {path}: not {fmt.upper()}: {str(e)[:200]}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"--set {path}: its top level is not a mapping of keys")
    return ConfigFile(path, fmt, value, hashlib.sha256(data).hexdigest())


def typed_value(text: str, current: Any, present: bool, where: str) -> Any:
    """The value ``text`` becomes in a config file whose key holds ``current`` (``present``
    False: the key is not there yet).

    DECISION: a value takes the type of the key's current value (a whole number stays one,
    ``true``/``false`` a boolean, text stays text), so ``4`` sets an int where the file
    holds one; a key the file lacks, or whose value is null or ``"auto"`` (DeepSpeed's
    placeholder that Transformers fills in), takes the value as JSON reads it (a number,
    true, false, null, a list or an object), else the text.

    >>> typed_value("4", 1, True, "k"), typed_value("4", "auto", True, "k")
    (4, 4)
    >>> typed_value("bf16", None, False, "k"), typed_value("true", False, True, "k")
    ('bf16', True)

    Raises:
        InvalidArgument: text that is no value of the current one's type.
    """
    def refuse(kind: str) -> InvalidArgument:
        return InvalidArgument(f"{where}: {text[:60]!r} is not {kind}, as the key's "
                               f"current value {str(current)[:40]!r} is")

    if present and isinstance(current, bool):
        if text.strip().lower() not in ("true", "false"):
            raise refuse("true or false")
        return text.strip().lower() == "true"
    if present and isinstance(current, int):
        try:
            return int(text.strip(), 10)
        except ValueError:
            raise refuse("a whole number") from None
    if present and isinstance(current, float):
        try:
            value = float(text)
        except ValueError:
            raise refuse("a number") from None
        if not math.isfinite(value):
            raise refuse("a finite number")
        return value
    if present and isinstance(current, (list, dict)):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            parsed = None
        if type(parsed) is not type(current):
            raise refuse(f"a JSON {'list' if isinstance(current, list) else 'object'}")
        return parsed
    if present and isinstance(current, str) and current != "auto":
        return text
    try:
        return json.loads(text, parse_constant=lambda c: c)
    except (ValueError, RecursionError):
        return text


def set_key(data: dict[str, Any], path: Sequence[str], text: str, where: str) -> Any:
    """A deep copy of ``data`` with the key ``path`` set to ``text`` (typed by
    :func:`typed_value`); a mapping missing on the way is made. Time O(size of ``data``).

    Raises:
        InvalidArgument: the path goes through a value that is neither a mapping nor a list,
            or indexes a list out of range or by a key that is not a whole number.
    """
    out = copy.deepcopy(data)
    node: Any = out
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if isinstance(node, list):
            if not re.fullmatch(r"\d+", part) or int(part) >= len(node):
                raise InvalidArgument(f"{where}: {'.'.join(path[:i + 1])} indexes a list of "
                                      f"{len(node)} items")
            key: Any = int(part)
            present = True
        elif isinstance(node, dict):
            key = part
            present = part in node
        else:
            raise InvalidArgument(f"{where}: {'.'.join(path[:i])} holds "
                                  f"{type(node).__name__}, not keys")
        if last:
            node[key] = typed_value(text, node[key] if present else None, present, where)
        else:
            if not present or node[key] is None:
                node[key] = {}
            node = node[key]
    return out


def dump_config(fmt: str, data: Any) -> bytes:
    """``data`` as a file of format ``fmt`` (``json``, ``yaml`` or ``toml``), UTF-8.

    DECISION: the copy is written anew, not edited in place: comments and the key order of
    YAML and TOML files are not kept (a tool reads the values, not the layout). TOML is
    written as one ``key = value`` line per top-level key, tables inline, and read back to
    check that it holds the same data.

    Raises:
        InvalidArgument: TOML that cannot hold the data (a null, a key of another type).
    """
    if fmt == "json":
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if fmt == "yaml":
        text = _yaml().safe_dump(data, sort_keys=False, allow_unicode=True)
        return str(text).encode("utf-8")
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data.items()]
    text = "\n".join(lines) + "\n"
    if _toml().loads(text) != data:
        raise InvalidArgument("the TOML copy would not hold the same values")
    return text.encode("utf-8")


def _toml_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidArgument(f"a TOML key is text, not {type(key).__name__}")
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_string(text: str) -> str:
    # JSON's escapes are TOML's basic-string escapes; DEL is a control character TOML
    # wants escaped and JSON does not
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}"
                               for k, v in value.items()) + "}"
    raise InvalidArgument(f"TOML cannot hold {type(value).__name__} (a null, say)")


# -- the files a command names ---------------------------------------------------------------

_HASHES: dict[tuple[str, int, int, int, int], str] = {}
_HASH_LOCK = threading.Lock()


def file_sha256(path: str) -> str:
    """The SHA-256 (hex) of the regular file ``path``, kept by its path, inode, size and
    modification time, so that each file of a plan is read once. Time O(its size).

    Raises:
        OSError: it cannot be read, or is not a regular file.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is not a regular file")
    memo = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _HASH_LOCK:
        found = _HASHES.get(memo)
    if found is not None:
        return found
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    with _HASH_LOCK:
        if len(_HASHES) > 4096:
            _HASHES.clear()
        _HASHES[memo] = digest.hexdigest()
    return digest.hexdigest()


def files_named(words: Sequence[str], cwd: str) -> list[str]:
    """The job's inputs that the command ``words`` names, as absolute paths in order, each
    once: a word (or the value of an option written ``--name=PATH``) that is the path (from
    ``cwd``) of a regular file ending in one of :data:`INPUT_SUFFIXES`.

    DECISION: a plan keys its answers by the scripts and config files its command names,
    not by every file: a file it names may be one the job writes (a log, a metrics file),
    whose bytes change with every run and would make every key new. Data and other files
    the job reads are named with ``--input``.

    >>> files_named(["python", "--x=/nonexistent.py"], "/")
    []
    """
    found: list[str] = []
    for word in words:
        candidates = [word]
        if word.startswith("-") and "=" in word:
            candidates.append(word.split("=", 1)[1])
        for c in candidates:
            if not c or "\x00" in c or not c.lower().endswith(INPUT_SUFFIXES):
                continue
            full = os.path.abspath(os.path.join(cwd, c))
            try:
                regular = stat.S_ISREG(os.stat(full).st_mode)
            except (OSError, ValueError):
                continue
            if regular and full not in found:
                found.append(full)
    return found
