"""Model stand-ins: reading ``<model file>.memsim.json``, what its ``"fn"`` may run, and
:func:`register_model`.

The simulator cannot run an ``.om`` model; a stand-in describes it (see
:mod:`ascend_memsim.compute.models` for the format). A stand-in file is hostile input: it is
read in time and memory bounded by its size (at most :data:`MAX_STANDIN_BYTES`, nested at
most :data:`MAX_DEPTH` levels), and its ``"fn"`` runs code only under this rule:

- code runs only when a model is *loaded* (``load_from_file``, ``load_from_mem`` and their
  ``_with_mem`` variants), never at ``query_size`` / ``query_size_from_mem``;
- ``"file.py:function"`` names a ``.py`` file inside the stand-in's directory (or below it): a
  relative path without ``..``, which still lies inside the directory once symlinks are
  resolved; the file is executed once per process, and later loads reuse its function;
- ``"module:function"`` is a dotted module name imported from ``sys.path`` by Python's own
  import system (once per process, as any import);
- a stand-in read from memory (``load_from_mem``) has no directory: it may name a module, not
  a file.

``ASCEND_MEMSIM_TRUST_STANDINS=1`` in the environment lifts the file rule (absolute paths,
``..`` and symlinks leaving the directory are allowed; a stand-in from memory resolves files
against the current directory). Refusals are ACL_ERROR_PARSE_MODEL 100013 with a message
that states the rule.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import itertools
import json
import os
import re
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from types import ModuleType
from typing import Any

from ..memory.args import SIZE_MAX, as_str, shown
from ..memory.constants import DATA_TYPE_BITS, DataType, Format
from ..memory.errors import AclError, InvalidArgumentType, InvalidFile, ModelParseError
from .gears import SHAPE_INPUT, Gears, parse_gears, resolve_dims
from .tensors import data_type

__all__ = ["TensorSpec", "ModelSpec", "parse_spec", "register_model", "unregister_model",
           "spec_for_file", "spec_for_bytes", "resolve_fn", "SUFFIX", "TRUST_ENV",
           "MAX_STANDIN_BYTES", "MAX_DEPTH"]

SUFFIX = ".memsim.json"
#: The environment variable that lifts the rule on where a stand-in's ``file.py`` may be.
TRUST_ENV = "ASCEND_MEMSIM_TRUST_STANDINS"
#: The largest stand-in read (a description of thousands of tensors is far smaller).
MAX_STANDIN_BYTES = 16 * 2**20
#: The deepest nesting of arrays and objects a stand-in may have (a valid one needs 4).
MAX_DEPTH = 32

#: ``repr(value)`` for a message, bounded, never an exception (a hostile value's ``__repr__``)
_show = partial(shown, typed=False)


def nbytes_of(dims: tuple[int, ...], dtype: DataType) -> int:
    count = 1
    for d in dims:
        count *= max(d, 0)
    return -(-count * DATA_TYPE_BITS.get(dtype, 0) // 8)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    #: as the description reports them: -1 where an input is dynamic, an output's largest gear
    dims: tuple[int, ...]
    dtype: DataType
    format: int = int(Format.ND)
    #: a dynamic model's dims of this tensor at each gear (empty: static)
    gear_dims: tuple[tuple[int, ...], ...] = ()

    @property
    def nbytes(self) -> int:
        """The bytes it takes (a dynamic tensor: at its largest gear, as the .om reports)."""
        if self.gear_dims:
            return max(nbytes_of(d, self.dtype) for d in self.gear_dims)
        return nbytes_of(self.dims, self.dtype)

    def dims_at(self, gear: int | None) -> tuple[int, ...]:
        """Its dims at gear number ``gear`` (None, or a static tensor: :attr:`dims`)."""
        return self.dims if gear is None or not self.gear_dims else self.gear_dims[gear]

    def dims_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dimCount": len(self.dims), "dims": list(self.dims)}


@dataclass(frozen=True)
class ModelSpec:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    weight_bytes: int = 0
    work_bytes: int = 0
    fn: Callable[..., Any] | None = None
    source: str = ""
    #: the stand-in's ``"fn"`` text, resolved by :func:`resolve_fn` when the model is loaded
    fn_ref: str | None = None
    #: the directory a ``file.py`` of ``fn_ref`` lies in (None: read from memory)
    base: str | None = None
    #: dynamic batch / image size / dims gears (None: static shapes); see compute.gears
    gears: Gears | None = None

    @property
    def shape_input(self) -> int | None:
        """The index of the ``ascend_mbatch_shape_data`` input (None: a static model)."""
        return len(self.inputs) - 1 if self.gears is not None else None


_EXAMPLE = {"inputs": [{"name": "x", "shape": [1, 3, 224, 224], "dtype": "float16",
                        "format": "NCHW"}],
            "outputs": [{"name": "y", "shape": [1, 1000], "dtype": "float32"}],
            "weight_bytes": 0, "work_bytes": 0}


def _tensor(entry: object, where: str, dynamic: bool = False) -> TensorSpec:
    if not isinstance(entry, Mapping):
        raise ModelParseError(f"{where} must be an object with name, shape, dtype")
    try:
        shape = entry["shape"]
        dtype = data_type(entry["dtype"], f"{where}.dtype")
    except KeyError as missing:
        raise ModelParseError(f"{where} has no {missing}") from None
    except AclError as error:
        raise ModelParseError(str(error.message)) from None
    low = -1 if dynamic else 0
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and low <= d < 1 << 63 for d in shape):
        what = "ints >= 0 (-1: a dynamic dim, with gears)" if dynamic else "ints >= 0"
        raise ModelParseError(f"{where}.shape must be a list of {what}, got {_show(shape)}")
    fmt = entry.get("format", "ND")
    if isinstance(fmt, str):
        name = fmt.upper().removeprefix("ACL_").removeprefix("FORMAT_")
        if name not in Format.__members__:
            raise ModelParseError(f"{where}.format {_show(fmt)} is not an aclFormat")
        fmt = Format[name]
    elif isinstance(fmt, bool) or not isinstance(fmt, int) or fmt not in \
            Format._value2member_map_:
        raise ModelParseError(f"{where}.format {_show(fmt)} is not an aclFormat")
    name = entry.get("name", where)
    if not isinstance(name, str):
        raise ModelParseError(f"{where}.name must be a string, got {_show(name)}")
    return TensorSpec(name, tuple(shape), dtype, int(fmt))


def _fn_ref(ref: object) -> str:
    """The ``"fn"`` text, checked for its form only (nothing is looked up or run).

    Raises:
        ModelParseError: not ``"module:function"`` nor ``"file.py:function"``.
    """
    if isinstance(ref, str) and ":" in ref:
        target, _, attr = ref.rpartition(":")
        if attr.isidentifier() and (target.endswith(".py") or all(
                part.isidentifier() for part in target.split("."))):
            return ref
    raise ModelParseError(f'"fn" must be "module:function" (a dotted module name importable '
                          f'from sys.path) or "file.py:function" (a file beside the stand-in), '
                          f"got {_show(ref)}")


def parse_spec(spec: object, source: str = "", base: str | None = ".",
               fn: Callable[..., Any] | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a stand-in dict (see :mod:`ascend_memsim.compute.models`).

    ``base``: the directory a ``"file.py:function"`` is looked for in (None: the stand-in was
    read from memory). Nothing is imported or run here: :func:`resolve_fn` does that when the
    model is loaded.

    Raises:
        ModelParseError: a missing or malformed field.
        InvalidArgumentType: ``fn`` is not callable.
    """
    if fn is not None and not callable(fn):
        raise InvalidArgumentType(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(spec, ModelSpec):
        return spec if fn is None else replace(spec, fn=fn, fn_ref=None)
    if not isinstance(spec, Mapping):
        raise ModelParseError(f"a model stand-in is a JSON object, got {type(spec).__name__}")
    for key in ("inputs", "outputs"):
        if not isinstance(spec.get(key), list):
            raise ModelParseError(f'the stand-in {source} needs "{key}": a list of tensors')
    sizes = {}
    for key in ("weight_bytes", "work_bytes"):
        value = spec.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < SIZE_MAX:
            raise ModelParseError(f'"{key}" must be an int >= 0, got {_show(value)}')
        sizes[key] = value
    ref = None
    if fn is None and spec.get("fn") is not None:
        ref = _fn_ref(spec["fn"])
    gears = parse_gears(spec)
    dynamic = gears is not None
    inputs = tuple(_tensor(e, f"inputs[{i}]", dynamic) for i, e in enumerate(spec["inputs"]))
    outputs = tuple(_tensor(e, f"outputs[{i}]", dynamic) for i, e in enumerate(spec["outputs"]))
    if gears is not None:  # dynamic
        inputs, outputs = _with_gears(gears, inputs, outputs)
    return ModelSpec(inputs, outputs, sizes["weight_bytes"], sizes["work_bytes"], fn, source,
                     ref, base, gears)


def _with_gears(gears: Gears, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]
                ) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The tensors with their dims at each gear, and the ``ascend_mbatch_shape_data`` input
    appended (see :mod:`ascend_memsim.compute.gears`).

    Raises:
        ModelParseError: no input is dynamic, the gears do not fit the -1 dims, or the
            stand-in lists ``ascend_mbatch_shape_data`` itself.
    """
    holes = [sum(d == -1 for d in t.dims) for t in inputs]
    if not any(holes):
        raise ModelParseError("the stand-in declares gears but no input has a -1 dim")
    if any(t.name == SHAPE_INPUT for t in inputs):
        raise ModelParseError(f"{SHAPE_INPUT!r} is added by the gears; do not list it")
    if gears.kind == "dims" and sum(holes) != gears.width:
        raise ModelParseError(f"each dynamic_dims gear has {gears.width} values, the inputs "
                              f"have {sum(holes)} -1 dims")
    count = range(len(gears.values))
    new_inputs, start = [], 0
    for i, (t, n) in enumerate(zip(inputs, holes)):
        per = tuple(resolve_dims(gears, t.dims, g, start, f"inputs[{i}]") for g in count)
        new_inputs.append(replace(t, gear_dims=per if n else ()))
        start += n
    new_outputs = []
    for i, t in enumerate(outputs):
        if -1 not in t.dims:
            new_outputs.append(t)
            continue
        per = tuple(resolve_dims(gears, t.dims, g, 0, f"outputs[{i}]") for g in count)
        largest = max(count, key=lambda g: nbytes_of(per[g], t.dtype))
        new_outputs.append(replace(t, dims=per[largest], gear_dims=per))
    # GE MultiBatchClonePass: GeShape({values per gear}), FORMAT_ND, DT_INT32
    shape = TensorSpec(SHAPE_INPUT, (gears.width,), DataType.INT32, int(Format.ND))
    return (*new_inputs, shape), tuple(new_outputs)


# -- what "fn" may run ---------------------------------------------------------------------------

_import_lock = threading.RLock()
#: resolved path of a stand-in's file.py -> its module, executed once per process
_modules: dict[str, ModuleType] = {}


def _trusted() -> bool:
    return os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _module_file(rel: str, base: str | None, ref: str) -> str:
    """The real path of the ``file.py`` a stand-in names, under the rule of the module
    docstring.

    Raises:
        ModelParseError: the path breaks the rule, or names no file.
    """
    lift = f"; set {TRUST_ENV}=1 to allow it"
    if base is None and not _trusted():
        raise ModelParseError(f'"fn" {_show(ref)}: a stand-in read from memory has no '
                              f"directory, so it may name a module (\"module:function\"), not a "
                              f"file{lift} (the file is then looked for in the current "
                              f"directory)")
    if not _trusted():
        parts = re.split(r"[\\/]", rel)
        if os.path.isabs(rel) or ".." in parts:
            raise ModelParseError(f'"fn" {_show(ref)}: a stand-in may only run a file inside '
                                  f"its own directory (a relative path without '..'){lift}")
    path = os.path.realpath(os.path.join(os.getcwd() if base is None else base, rel))
    if base is not None and not _trusted():  # (no base: trusted, see above)
        root = os.path.realpath(base)
        if os.path.commonpath([root, path]) != root:
            raise ModelParseError(f'"fn" {_show(ref)}: {rel} resolves (through a symlink) to '
                                  f"{path}, outside the stand-in's directory {root}{lift}")
    if not os.path.isfile(path):
        raise ModelParseError(f'"fn" {_show(ref)}: no such file {path}')
    return path


def _load_module(ref: str, base: str | None) -> ModuleType:
    target = ref.rpartition(":")[0]
    if not target.endswith(".py"):
        return importlib.import_module(target)
    path = _module_file(target, base, ref)
    with _import_lock:
        module = _modules.get(path)
        if module is None:
            spec = importlib.util.spec_from_file_location(
                f"memsim_model_{zlib.crc32(path.encode()):08x}", path)
            # a .py path always has a spec and a loader
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            # kept only once it ran to the end: a file that failed is tried again next load
            _modules[path] = module
    return module


def resolve_fn(spec: ModelSpec) -> ModelSpec:
    """``spec`` with its ``"fn"`` imported (the first time) and looked up; called when the
    model is loaded, never by ``query_size``.

    Raises:
        ModelParseError: the reference breaks the rule, or importing it failed (an exception
            or ``sys.exit`` in the module), or it names nothing callable.
    """
    ref = spec.fn_ref
    if spec.fn is not None or ref is None:
        return spec
    try:
        fn = getattr(_load_module(ref, spec.base), ref.rpartition(":")[2])
    except ModelParseError:
        raise
    except (Exception, SystemExit) as error:
        # SystemExit too: a stand-in's module must not end the program from inside a call
        # (KeyboardInterrupt still stops it)
        what = (f"called sys.exit({_show(error.code)})" if isinstance(error, SystemExit)
                else f"{type(error).__name__}: {error}")
        raise ModelParseError(f'"fn" {_show(ref)} cannot be loaded: {what}') from None
    if not callable(fn):
        raise ModelParseError(f'"fn" {_show(ref)} is not callable')
    return replace(spec, fn=fn)


# -- reading stand-ins ---------------------------------------------------------------------------

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[^\[\]{}]+")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _parse_json(data: bytes, where: str) -> object:
    """The JSON value of ``data``: O(len(data)) time and memory, nesting at most MAX_DEPTH
    (json itself would recurse once per level).

    Raises:
        ModelParseError: too large, nested too deeply, not UTF-8 or not JSON.
    """
    if len(data) > MAX_STANDIN_BYTES:
        raise ModelParseError(f"{where}: {len(data)} bytes, more than a stand-in's "
                              f"{MAX_STANDIN_BYTES} bytes")
    brackets = _BRACKETS.sub(b"", _STRING.sub(b"", data))
    depth = max(itertools.accumulate(_STEP[b] for b in brackets), default=0)
    if depth > MAX_DEPTH:
        raise ModelParseError(f"{where}: arrays and objects nested {depth} deep; a stand-in "
                              f"nests at most {MAX_DEPTH} levels")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ModelParseError(f"{where}: not valid JSON ({error})") from None


def _read_standin(json_path: str) -> bytes:
    try:
        with open(json_path, "rb") as f:
            return f.read(MAX_STANDIN_BYTES + 1)
    except OSError as error:
        raise ModelParseError(f"{json_path}: cannot be read ({error.strerror})") from None


_lock = threading.RLock()
_registered: dict[str, ModelSpec] = {}
_registered_digests: dict[str, ModelSpec] = {}


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def register_model(path: str, spec: object, fn: Callable[..., Any] | None = None) -> ModelSpec:
    """Describe the model file at ``path`` without a JSON stand-in (process-wide).

    ``spec`` is the stand-in's dict (or a :class:`ModelSpec`); ``fn(inputs) -> outputs``
    overrides its ``"fn"`` (a ``"file.py:function"`` in the dict is looked for beside
    ``path``, under the rule of the module docstring, when the model is loaded). If the file
    exists, a copy of its bytes loaded with ``load_from_mem`` is recognised too.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentType(f"path must be a str, got {type(path).__name__}")
    key = os.path.abspath(os.fspath(path))
    parsed = parse_spec(spec, key, os.path.dirname(key), fn)
    with _lock:
        _registered[key] = parsed
        if os.path.isfile(key):
            _registered_digests[_digest(key)] = parsed
    return parsed


def unregister_model(path: str) -> None:
    key = os.path.abspath(os.fspath(path))
    with _lock:
        spec = _registered.pop(key, None)
        for digest, other in list(_registered_digests.items()):
            if other is spec:
                del _registered_digests[digest]


def how_to(path: str) -> str:
    """What to write so that the model file at ``path`` loads (for messages)."""
    example = ",\n ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in _EXAMPLE.items())
    example = "{" + example + "}"
    return (f"write the stand-in {path + SUFFIX} describing the model, e.g.\n{example}\n"
            f'(dtype: a numpy name or aclDataType; optional "fn": "module:function"; dynamic '
            f'shapes: -1 dims and "dynamic_batch_size": [1, 2, 4, 8], "dynamic_image_size": '
            f'[[224, 224], [448, 448]] or "dynamic_dims": [[1, 224], [2, 448]]), or call '
            f"ascend_memsim.register_model({path!r}, spec, fn=None)")


def spec_for_file(path: object) -> ModelSpec:
    """The stand-in of the model file at ``path`` (registered, else its JSON); its ``fn`` not
    yet resolved (:func:`resolve_fn`).

    DECISION: a model file that is missing or empty (0 bytes) loads when a stand-in describes
    it: the stand-in stands for the model the device has, and an empty file is how a program
    that checks its model file exists (acllite's ``AclLiteModel``: ``os.path.isfile``) runs
    without the real ``.om``. Without a stand-in an empty file is ACL_ERROR_INVALID_FILE, as on
    hardware (GE ``ModelParserBase::LoadFromFile`` refuses a file of length 0).

    Raises:
        InvalidFile: no stand-in and no file; an empty model file without a stand-in.
        ModelParseError: no stand-in for an existing file; a malformed stand-in.
    """
    path = as_str(path, "model path")
    if "\0" in path:
        raise InvalidFile(f"model path {_show(path)} holds a NUL character")
    key = os.path.abspath(path)
    with _lock:
        found = _registered.get(key)
    if found is not None:
        return found
    json_path = path + SUFFIX
    if not os.path.isfile(json_path):
        if _is_empty(path):
            raise InvalidFile(f"{path}: the model file is empty (0 bytes), which the runtime "
                              f"cannot load; with a stand-in beside it it loads: "
                              f"{how_to(path)}")
        if os.path.isfile(path) and _starts_json(path):
            # DECISION: a model file that is itself a stand-in JSON loads, as its bytes do
            # with load_from_mem: so one file serves a program that loads from the file and
            # one that reads the file and loads the bytes (its "fn" files: beside it)
            raw = _parse_json(_read_standin(path), path)
            return parse_spec(raw, path, os.path.dirname(os.path.abspath(path)))
        if os.path.exists(path):
            raise ModelParseError(f"{path}: the simulator cannot read .om models; "
                                  f"{how_to(path)}")
        raise InvalidFile(f"{path}: no such model file and no stand-in; {how_to(path)}")
    raw = _parse_json(_read_standin(json_path), json_path)
    return parse_spec(raw, json_path, os.path.dirname(os.path.abspath(json_path)))


def _is_empty(path: str) -> bool:
    try:
        return os.path.isfile(path) and os.path.getsize(path) == 0
    except OSError:       # gone between the two calls: the lookups that follow say so
        return False


def _starts_json(path: str) -> bool:
    """Whether the file's first non-blank byte (of its first 4 KiB) is ``{``."""
    try:
        with open(path, "rb") as f:
            return f.read(4096).lstrip()[:1] == b"{"
    except OSError:
        return False


def spec_for_bytes(data: bytes) -> ModelSpec:
    """The stand-in of a model held in memory: the stand-in JSON itself, or the bytes of a
    registered model file; its ``fn`` not yet resolved."""
    with _lock:
        found = _registered_digests.get(hashlib.sha256(data).hexdigest())
    if found is not None:
        return found
    if len(data) > MAX_STANDIN_BYTES or data.lstrip()[:1] != b"{":
        raise ModelParseError(
            "the model in memory is neither a stand-in JSON nor the bytes of a model file "
            "passed to ascend_memsim.register_model; load the stand-in JSON's bytes (a "
            "program that reads its model file and loads the bytes: write the stand-in JSON "
            "as the model file itself, which load_from_file reads too), or register the file")
    return parse_spec(_parse_json(data, "the stand-in in memory"), "<memory>", None)
