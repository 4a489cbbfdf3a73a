"""Models (acl.mdl): loading, descriptions, datasets, execution of models described by stand-ins.

The simulator cannot run an ``.om`` model. A model is described by a *stand-in*: a JSON file
beside it, ``<model file>.memsim.json``, or :func:`register_model`::

    {"inputs":  [{"name": "data", "shape": [1, 3, 224, 224], "dtype": "float16",
                  "format": "NCHW"}],
     "outputs": [{"name": "prob", "shape": [1, 1000], "dtype": "float32"}],
     "weight_bytes": 102400000, "work_bytes": 8388608,
     "fn": "my_module:forward"}

``dtype`` is a numpy name or an aclDataType value; ``format`` an aclFormat name or value
(default ND); ``fn`` (optional) is ``module:function`` importable from ``sys.path``, or
``file.py:function`` inside the JSON's directory; it gets the input arrays and returns the
output array(s). Without it the outputs are filled deterministically from the inputs (a
generator seeded with their bytes: the same inputs give the same outputs). Reading stand-ins,
and the rule on what their ``fn`` may run (only at load, only files inside the stand-in's
directory, each imported once), live in :mod:`ascend_memsim.compute.standins`.

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
it exists (the simulator cannot read ``.om``) or the stand-in is malformed; an empty model
file is 100003 even with a stand-in (the runtime cannot load it). ``execute`` runs
at once; ``execute_async`` is queued on the stream like an operator. A dataset needs exactly
as many buffers as the model has inputs (100017) / outputs (100018), each at least the size of
its tensor. Dynamic batch, image size and dims queries answer "not dynamic".
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from ..memory.args import as_int
from ..memory.constants import DataType, MallocPolicy
from ..memory.errors import (
    AclError,
    InvalidArgument,
    InvalidArgumentType,
    InvalidModelId,
    ModelInputMismatch,
    ModelOutputMismatch,
)
from ..memory.rules import Api
from .launch import Operand, check_operand, launch
from .standins import (
    ModelSpec,
    TensorSpec,
    parse_spec,
    register_model,
    resolve_fn,
    spec_for_bytes,
    spec_for_file,
    unregister_model,
)
from .tensors import DataBuffer, Handle, numpy_dtype, require_numpy

__all__ = ["register_model", "unregister_model", "ModelSpec", "TensorSpec", "Models",
           "Dataset", "ModelDesc", "parse_spec", "spec_for_file", "spec_for_bytes"]

#: aclrtMallocConfig module id of the graph engine (log_types.h: GE = 45).
MODULE_GE = 45


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
        """Resolve the stand-in's ``fn`` (the only point where a stand-in runs code), charge
        the model's memory (or check the caller's, ``mem``) and give it an id."""
        device = self.runtime.current_device()
        spec = resolve_fn(spec)
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
        if not isinstance(name, str):
            # pyacl binds the name as a C string (const char *)
            raise InvalidArgumentType(f"name must be a str, got {type(name).__name__}")
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
        launch(self.runtime, call, stream, ins, outs, fn, name,
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
