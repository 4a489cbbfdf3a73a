"""Models (acl.mdl): stand-ins for ``.om`` files, loading, descriptions, datasets, execution.

The simulator cannot run an ``.om`` model. A model is described by a *stand-in*: a JSON file
beside it, ``<model file>.memsim.json``, or :func:`register_model`::

    {"inputs":  [{"name": "data", "shape": [1, 3, 224, 224], "dtype": "float16",
                  "format": "NCHW"}],
     "outputs": [{"name": "prob", "shape": [1, 1000], "dtype": "float32"}],
     "weight_bytes": 102400000, "work_bytes": 8388608,
     "fn": "my_module:forward"}

``dtype`` is a numpy name or an aclDataType value; ``format`` an aclFormat name or value
(default ND); ``fn`` (optional) is ``module:function`` importable from ``sys.path``, or
``file.py:function`` relative to the JSON; it gets the input arrays and returns the output
array(s). Without it the outputs are filled deterministically from the inputs (a generator
seeded with their bytes: the same inputs give the same outputs).

pyacl shapes (hicann/runtime python/pyACL/mdl/mdl_wrap.cpp): ``load_from_file(path)`` ->
``(model_id, ret)``; ``query_size(path)`` -> ``(work_size, weight_size, ret)``;
``get_input_dims(desc, i)`` -> ``({"name", "dimCount", "dims"}, ret)``, ``{}`` on an error;
``add_dataset_buffer(dataset, buffer)`` -> ``(dataset, ret)``.

DECISIONs: loading charges ``work_bytes`` and ``weight_bytes`` to the current device as two
blocks (module GE, so usage info names them; a model that does not fit fails to load with
ACL_ERROR_RT_MEMORY_ALLOCATION 207001 and charges nothing); the ``_with_mem`` variants check
that the caller's blocks are live device memory at least as large as the stand-in says
(ACL_ERROR_INVALID_PARAM 100000 otherwise). A model file with no stand-in is
ACL_ERROR_INVALID_FILE 100003 when the file is missing too, ACL_ERROR_PARSE_MODEL 100013 when
it exists (the simulator cannot read ``.om``) or the stand-in is malformed. ``execute`` runs
at once; ``execute_async`` is queued on the stream like an operator. A dataset needs exactly
as many buffers as the model has inputs (100017) / outputs (100018), each at least the size of
its tensor. Dynamic batch, image size and dims queries answer "not dynamic".
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import itertools
import json
import os
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..memory.args import SIZE_MAX, as_int, as_str
from ..memory.constants import DATA_TYPE_BITS, DataType, Format, MallocPolicy
from ..memory.errors import (
    AclError,
    InvalidArgument,
    InvalidArgumentType,
    InvalidFile,
    InvalidModelId,
    ModelInputMismatch,
    ModelOutputMismatch,
    ModelParseError,
)
from ..memory.rules import Api
from .launch import Operand, check_operand, launch
from .tensors import DataBuffer, Handle, data_type, numpy_dtype, require_numpy

__all__ = ["register_model", "unregister_model", "ModelSpec", "TensorSpec", "Models",
           "Dataset", "ModelDesc", "parse_spec"]

#: aclrtMallocConfig module id of the graph engine (log_types.h: GE = 45).
MODULE_GE = 45
SUFFIX = ".memsim.json"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dims: tuple[int, ...]
    dtype: DataType
    format: int = int(Format.ND)

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.dims:
            count *= max(d, 0)
        return -(-count * DATA_TYPE_BITS.get(self.dtype, 0) // 8)

    def dims_dict(self) -> dict:
        return {"name": self.name, "dimCount": len(self.dims), "dims": list(self.dims)}


@dataclass(frozen=True)
class ModelSpec:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    weight_bytes: int = 0
    work_bytes: int = 0
    fn: Callable | None = None
    source: str = ""


_EXAMPLE = {"inputs": [{"name": "x", "shape": [1, 3, 224, 224], "dtype": "float16",
                        "format": "NCHW"}],
            "outputs": [{"name": "y", "shape": [1, 1000], "dtype": "float32"}],
            "weight_bytes": 0, "work_bytes": 0}


def _tensor(entry: object, where: str) -> TensorSpec:
    if not isinstance(entry, Mapping):
        raise ModelParseError(f"{where} must be an object with name, shape, dtype")
    try:
        shape = entry["shape"]
        dtype = data_type(entry["dtype"], f"{where}.dtype")
    except KeyError as missing:
        raise ModelParseError(f"{where} has no {missing}") from None
    except AclError as error:
        raise ModelParseError(str(error.message)) from None
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and d >= 0 for d in shape):
        raise ModelParseError(f"{where}.shape must be a list of ints >= 0, got {shape!r}")
    fmt = entry.get("format", "ND")
    if isinstance(fmt, str):
        name = fmt.upper().removeprefix("ACL_").removeprefix("FORMAT_")
        if name not in Format.__members__:
            raise ModelParseError(f"{where}.format {fmt!r} is not an aclFormat")
        fmt = Format[name]
    elif fmt not in Format._value2member_map_:
        raise ModelParseError(f"{where}.format {fmt!r} is not an aclFormat")
    return TensorSpec(str(entry.get("name", where)), tuple(shape), dtype, int(fmt))


def _function(ref: object, base: str) -> Callable:
    if not isinstance(ref, str) or ":" not in ref:
        raise ModelParseError(f'"fn" must be "module:function" or "file.py:function", got '
                              f"{ref!r}")
    module_name, _, attr = ref.rpartition(":")
    try:
        if module_name.endswith(".py"):
            path = os.path.join(base, module_name)
            spec = importlib.util.spec_from_file_location(
                f"memsim_model_{zlib.crc32(path.encode())}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        fn = getattr(module, attr)
    except Exception as error:
        raise ModelParseError(f'"fn" {ref!r} cannot be loaded: {type(error).__name__}: '
                              f"{error}") from None
    if not callable(fn):
        raise ModelParseError(f'"fn" {ref!r} is not callable')
    return fn


def parse_spec(spec: object, source: str = "", base: str = ".",
               fn: Callable | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a stand-in dict (see the module docstring).

    Raises:
        ModelParseError: a missing or malformed field.
    """
    if isinstance(spec, ModelSpec):
        return spec if fn is None else ModelSpec(spec.inputs, spec.outputs, spec.weight_bytes,
                                                 spec.work_bytes, fn, spec.source)
    if not isinstance(spec, Mapping):
        raise ModelParseError(f"a model stand-in is a JSON object, got {type(spec).__name__}")
    for key in ("inputs", "outputs"):
        if not isinstance(spec.get(key), list):
            raise ModelParseError(f'the stand-in {source} needs "{key}": a list of tensors')
    sizes = {}
    for key in ("weight_bytes", "work_bytes"):
        value = spec.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < SIZE_MAX:
            raise ModelParseError(f'"{key}" must be an int >= 0, got {value!r}')
        sizes[key] = value
    if fn is None and spec.get("fn") is not None:
        fn = _function(spec["fn"], base)
    if fn is not None and not callable(fn):
        raise InvalidArgumentType(f"fn must be callable, got {type(fn).__name__}")
    return ModelSpec(tuple(_tensor(e, f"inputs[{i}]") for i, e in enumerate(spec["inputs"])),
                     tuple(_tensor(e, f"outputs[{i}]") for i, e in enumerate(spec["outputs"])),
                     sizes["weight_bytes"], sizes["work_bytes"], fn, source)


_lock = threading.RLock()
_registered: dict[str, ModelSpec] = {}
_registered_digests: dict[str, ModelSpec] = {}


def register_model(path: str, spec: object, fn: Callable | None = None) -> ModelSpec:
    """Describe the model file at ``path`` without a JSON stand-in (process-wide).

    ``spec`` is the stand-in's dict (or a :class:`ModelSpec`); ``fn(inputs) -> outputs``
    overrides its ``"fn"``. If the file exists, a copy of its bytes loaded with
    ``load_from_mem`` is recognised too.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentType(f"path must be a str, got {type(path).__name__}")
    key = os.path.abspath(os.fspath(path))
    parsed = parse_spec(spec, key, os.path.dirname(key), fn)
    with _lock:
        _registered[key] = parsed
        if os.path.isfile(key):
            with open(key, "rb") as f:
                _registered_digests[hashlib.sha256(f.read()).hexdigest()] = parsed
    return parsed


def unregister_model(path: str) -> None:
    key = os.path.abspath(os.fspath(path))
    with _lock:
        spec = _registered.pop(key, None)
        for digest, other in list(_registered_digests.items()):
            if other is spec:
                del _registered_digests[digest]


def _how_to(path: str) -> str:
    example = ",\n ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in _EXAMPLE.items())
    example = "{" + example + "}"
    return (f"write the stand-in {path + SUFFIX} describing the model, e.g.\n{example}\n"
            f'(dtype: a numpy name or aclDataType; optional "fn": "module:function"), or call '
            f"ascend_memsim.register_model({path!r}, spec, fn=None)")


def spec_for_file(path: object) -> ModelSpec:
    """The stand-in of the model file at ``path`` (registered, else its JSON).

    Raises:
        InvalidFile, ModelParseError: see the module docstring.
    """
    as_str(path, "model path")
    key = os.path.abspath(path)
    with _lock:
        found = _registered.get(key)
    if found is not None:
        return found
    json_path = path + SUFFIX
    if not os.path.isfile(json_path):
        if os.path.exists(path):
            raise ModelParseError(f"{path}: the simulator cannot read .om models; "
                                  f"{_how_to(path)}")
        raise InvalidFile(f"{path}: no such model file and no stand-in; {_how_to(path)}")
    try:
        with open(json_path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as error:
        raise ModelParseError(f"{json_path}: not valid JSON ({error})") from None
    return parse_spec(raw, json_path, os.path.dirname(os.path.abspath(json_path)))


def spec_for_bytes(data: bytes) -> ModelSpec:
    """The stand-in of a model held in memory: the stand-in JSON itself, or the bytes of a
    registered model file."""
    with _lock:
        found = _registered_digests.get(hashlib.sha256(data).hexdigest())
    if found is not None:
        return found
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ModelParseError(
            "the model in memory is neither a stand-in JSON nor the bytes of a model file "
            "passed to ascend_memsim.register_model; load the stand-in JSON's bytes, or "
            "register the file") from None
    return parse_spec(raw, "<memory>")


@dataclass(eq=False)
class Model(Handle):
    model_id: int = 0
    spec: ModelSpec | None = None
    device_id: int = 0
    #: blocks the load charged (freed by unload); empty for the _with_mem variants
    blocks: tuple[int, ...] = ()
    made_by = "aclmdlLoadFromFile"
    destroyed_by = "aclmdlUnload"
    kind = "model"

    def describe(self) -> str:
        return (f"model {self.model_id} ({self.spec.source or 'from memory'}; unload it with "
                f"aclmdlUnload)")


@dataclass(eq=False)
class ModelDesc(Handle):
    spec: ModelSpec | None = None
    made_by = "aclmdlCreateDesc"
    destroyed_by = "aclmdlDestroyDesc"
    kind = "model description"


@dataclass(eq=False)
class Dataset(Handle):
    buffers: list[int] = field(default_factory=list)
    made_by = "aclmdlCreateDataset"
    destroyed_by = "aclmdlDestroyDataset"
    kind = "dataset"


class Models:
    """The loaded models of one compute plane (thread-safe: the handle table's lock)."""

    def __init__(self, plane) -> None:
        self.plane = plane
        self.runtime = plane.runtime
        self.handles = plane.handles
        self._ids = itertools.count(1)
        self._loaded: dict[int, Model] = {}

    # -- loading -------------------------------------------------------------------------------

    def load(self, spec: ModelSpec, mem: tuple | None = None) -> int:
        """Charge the model's memory (or check the caller's, ``mem``) and give it an id."""
        device = self.runtime.current_device()
        blocks: list[int] = []
        if mem is None:
            try:
                for size in (spec.work_bytes, spec.weight_bytes):
                    if size:
                        blocks.append(device.malloc(size, MallocPolicy.HUGE_FIRST,
                                                    api=Api.MALLOC, module=MODULE_GE))
            except AclError:
                for ptr in blocks:
                    device.free(ptr)
                raise
        else:
            self._check_mem(spec, *mem)
        model = Model(model_id=next(self._ids), spec=spec, device_id=device.device_id,
                      blocks=tuple(blocks))
        self.handles.add(model)
        with self.handles.lock:
            self._loaded[model.model_id] = model
        return model.model_id

    def _check_mem(self, spec: ModelSpec, work_ptr: object, work_size: object,
                   weight_ptr: object, weight_size: object) -> None:
        for what, ptr, size, need in (("work", work_ptr, work_size, spec.work_bytes),
                                      ("weight", weight_ptr, weight_size, spec.weight_bytes)):
            ptr = as_int(ptr, f"{what}_ptr")
            size = as_int(size, f"{what}_size")
            if size < need:
                raise InvalidArgument(f"{what}_size {size} is less than the {need} bytes the "
                                      f"model needs (query_size)")
            if need and not ptr:
                raise InvalidArgument(f"{what}_ptr is NULL but the model needs {need} bytes")
            if need:
                check_operand(self.runtime, "aclmdlLoadWithMem",
                              Operand(f"{what} memory", ptr, need, DataType.UINT8, (need,)),
                              write=True)

    def model(self, model_id: object) -> Model:
        number = as_int(model_id, "model_id", None, None)
        model = self._loaded.get(number)
        if model is None:
            raise InvalidModelId(f"model id {number} was never loaded or was unloaded")
        return model

    def unload(self, model_id: object) -> None:
        with self.handles.lock:
            model = self.model(model_id)
            del self._loaded[model.model_id]
            self.handles.remove(model.handle, Model)
        device = self.runtime.device(model.device_id)
        for ptr in model.blocks:
            if device.block(ptr) is not None:
                device.free(ptr)

    # -- descriptions ----------------------------------------------------------------------

    def get_desc(self, desc: object, model_id: object) -> None:
        target = self.handles.get(desc, ModelDesc, "model_desc")
        target.spec = self.model(model_id).spec

    def described(self, desc: object) -> ModelSpec:
        spec = self.handles.get(desc, ModelDesc, "model_desc").spec
        if spec is None:
            raise InvalidArgument("the model description is empty: call "
                                  "acl.mdl.get_desc(desc, model_id) first")
        return spec

    def tensor(self, desc: object, index: object, outputs: bool) -> TensorSpec:
        tensors = self.described(desc).outputs if outputs else self.described(desc).inputs
        i = as_int(index, "index")
        if i >= len(tensors):
            raise InvalidArgument(f"index {i} is outside the model's {len(tensors)} "
                                  f"{'outputs' if outputs else 'inputs'}")
        return tensors[i]

    def index_by_name(self, desc: object, name: object, outputs: bool) -> int:
        tensors = self.described(desc).outputs if outputs else self.described(desc).inputs
        for i, t in enumerate(tensors):
            if t.name == name:
                return i
        raise InvalidArgument(f"the model has no {'output' if outputs else 'input'} named "
                              f"{name!r} (names: {[t.name for t in tensors]})")

    # -- datasets --------------------------------------------------------------------------

    def add_buffer(self, dataset: object, buffer: object) -> None:
        ds = self.handles.get(dataset, Dataset, "dataset")
        buf = self.handles.get(buffer, DataBuffer, "data_buffer")
        with self.handles.lock:
            ds.buffers.append(buf.handle)

    def dataset_buffer(self, dataset: object, index: object) -> int:
        ds = self.handles.get(dataset, Dataset, "dataset")
        i = as_int(index, "index")
        if i >= len(ds.buffers):
            raise InvalidArgument(f"index {i} is outside the dataset's {len(ds.buffers)} "
                                  f"buffers")
        return ds.buffers[i]

    # -- execution -------------------------------------------------------------------------

    def _operands(self, dataset: object, tensors: tuple[TensorSpec, ...], what: str,
                  mismatch: type) -> list[Operand]:
        ds = self.handles.get(dataset, Dataset, f"{what} dataset")
        if len(ds.buffers) != len(tensors):
            raise mismatch(f"the {what} dataset holds {len(ds.buffers)} buffers, the model "
                           f"has {len(tensors)} {what}s")
        operands = []
        for i, (h, t) in enumerate(zip(ds.buffers, tensors)):
            buf = self.handles.get(h, DataBuffer, f"{what} buffer {i}")
            if buf.nbytes < t.nbytes or (t.nbytes and not buf.addr):
                raise mismatch(f"{what} buffer {i} ({t.name}) holds {buf.nbytes} bytes, the "
                               f"model's {what} needs {t.nbytes}")
            operands.append(Operand(f"{what} {i} ({t.name})", buf.addr, t.nbytes, t.dtype,
                                    t.dims))
        return operands

    def execute(self, model_id: object, inputs: object, outputs: object,
                stream: object = None) -> None:
        """aclmdlExecute (``stream`` None: now) or aclmdlExecuteAsync (queued)."""
        model = self.model(model_id)
        spec = model.spec
        ins = self._operands(inputs, spec.inputs, "input", ModelInputMismatch)
        outs = self._operands(outputs, spec.outputs, "output", ModelOutputMismatch)
        for t in (*spec.inputs, *spec.outputs):
            numpy_dtype(t.dtype)
        fn = spec.fn or _default_fn(spec)
        call = "aclmdlExecute" if stream is None else "aclmdlExecuteAsync"
        name = f"model {model.model_id} function {getattr(fn, '__name__', fn)!r}"
        launch(self.runtime, call, stream, ins, outs, lambda arrays: fn(arrays), name,
               mismatch=ModelOutputMismatch)

    def close(self) -> None:
        self._loaded.clear()


def _default_fn(spec: ModelSpec) -> Callable[[list], list]:
    """Outputs filled from a generator seeded with the inputs' bytes."""

    def fill(arrays: list) -> list:
        np = require_numpy()
        seed = 0
        for a in arrays:
            seed = zlib.crc32(a.tobytes(), seed)
        rng = np.random.default_rng(seed)
        outs = []
        for t in spec.outputs:
            dtype = numpy_dtype(t.dtype)
            if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
                outs.append(rng.integers(0, 2 if dtype == np.bool_ else 100, t.dims)
                            .astype(dtype))
            else:
                outs.append(rng.random(t.dims).astype(dtype))
        return outs

    fill.__name__ = "default (seeded by the inputs)"
    return fill
