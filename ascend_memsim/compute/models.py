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
file is 100003 without a stand-in and loads with one. ``execute`` runs
at once; ``execute_async`` is queued on the stream like an operator. On a stream with a
registered allocator (11-08: dynamic-shape models with aclmdlExecuteAsync) each
``execute_async`` also asks it for ``work_bytes`` of work memory, with ``alloc_advise`` at the
address the model's previous execution got (DECISION: a stand-in does not say whether its
model is dynamic-shape, so every model does; the load still charges ``work_bytes``). A
dataset needs exactly as many buffers as the model has inputs (100017) / outputs (100018),
each at least the size of its tensor (of the tensor at the gear, for a model with dynamic
gears: see
:mod:`ascend_memsim.compute.gears`).
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from ..memory.args import SIZE_MAX, as_int
from ..memory.constants import DataType, MallocPolicy
from ..memory.errors import (
    AclError,
    DynamicGearInvalid,
    DynamicInputLengthInvalid,
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
    nbytes_of,
    parse_spec,
    register_model,
    resolve_fn,
    spec_for_bytes,
    spec_for_file,
    unregister_model,
)
from .tensors import DataBuffer, Handle, TensorDesc, numpy_dtype, require_numpy

__all__ = ["register_model", "unregister_model", "ModelSpec", "TensorSpec", "Models",
           "Dataset", "ModelDesc", "parse_spec", "spec_for_file", "spec_for_bytes"]

#: aclrtMallocConfig module id of the graph engine (log_types.h: GE = 45).
MODULE_GE = 45


@dataclass(eq=False)
class Model(Handle):
    model_id: int = 0
    # always given: the default is there only because model_id, before it, has one
    spec: ModelSpec = None  # type: ignore[assignment]
    device_id: int = 0
    #: blocks the load charged (freed by unload); empty for the _with_mem variants
    blocks: tuple[int, ...] = ()
    #: the gear the last aclmdlSetDynamic*/SetInputDynamicDims chose (None: none yet)
    gear: int | None = None
    #: where the last aclmdlExecuteAsync's work memory from a registered allocator was (the
    #: address it asks alloc_advise for next time; 0: none yet)
    work_ptr: int = 0
    made_by = "aclmdlLoadFromFile"
    destroyed_by = "aclmdlUnload"
    kind = "model"

    def describe(self) -> str:
        return (f"model {self.model_id} ({self.spec.source or 'from memory'}; unload it with "
                f"aclmdlUnload)")


@dataclass(eq=False)
class ModelDesc(Handle):
    spec: ModelSpec | None = None
    #: the model aclmdlGetDesc described (its current gear: aclmdlGetCurOutputDims)
    model: Model | None = None
    made_by = "aclmdlCreateDesc"
    destroyed_by = "aclmdlDestroyDesc"
    kind = "model description"


@dataclass(eq=False)
class Dataset(Handle):
    buffers: list[int] = field(default_factory=list)
    #: the gear a set call chose for this input dataset, as (kind, values) (GE keeps it on
    #: the dataset: dynamicBatchSize, dynamicResolutionHeight/Width, dynamicDims)
    gear: tuple[str, tuple[int, ...]] | None = None
    #: aclmdlSetDatasetTensorDesc: index -> the dataset's own copy of the descriptor
    descs: dict[int, DatasetTensorDesc] = field(default_factory=dict)
    made_by = "aclmdlCreateDataset"
    destroyed_by = "aclmdlDestroyDataset"
    kind = "dataset"


@dataclass(eq=False)
class DatasetTensorDesc(TensorDesc):
    """A dataset's copy of a tensor descriptor (aclmdlSetDatasetTensorDesc copies it; the
    dataset frees it: model_om2.cpp ``aclmdlSetDatasetTensorDescImplOm2``)."""

    made_by = "aclmdlSetDatasetTensorDesc"
    destroyed_by = "aclmdlDestroyDataset"
    kind = "dataset tensor descriptor"


class Models:
    """The loaded models of one compute plane (thread-safe: the handle table's lock).

    Size: just over 350 lines, on purpose: acl.mdl's calls (load, descriptions, dynamic
    gears, datasets, execute) each take a few lines over one table of loaded models and the
    handle table; what has a seam of its own is apart: the gear tables (:mod:`.gears`), the
    stand-ins (:mod:`.standins`), running a model on a stream (:mod:`.launch`).
    """

    def __init__(self, plane: Any) -> None:
        self.plane = plane
        self.runtime = plane.runtime
        self.handles = plane.handles
        self._ids = itertools.count(1)
        self._loaded: dict[int, Model] = {}

    # -- loading -------------------------------------------------------------------------------

    def load(self, spec: ModelSpec, mem: tuple[Any, ...] | None = None) -> int:
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
        model = self.model(model_id)
        target.spec, target.model = model.spec, model

    def described(self, desc: object) -> ModelSpec:
        spec = self.handles.get(desc, ModelDesc, "model_desc").spec
        if spec is None:
            raise InvalidArgument("the model description is empty: call "
                                  "acl.mdl.get_desc(desc, model_id) first")
        return cast("ModelSpec", spec)

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

    # -- dynamic gears (hicann/ge api/acl/acl_model/model/model.cpp, model_om2.cpp) --------

    def dynamic_batch(self, desc: object) -> dict[str, Any]:
        """aclmdlGetDynamicBatch: ``batchCount`` 0 for a model without batch gears."""
        gears = self.described(desc).gears
        batch = [g[0] for g in gears.values] if gears and gears.kind == "batch" else []
        return {"batchCount": len(batch), "batch": batch}

    def dynamic_hw(self, desc: object, index: object) -> dict[str, Any]:
        """aclmdlGetDynamicHW: ``index`` is reserved and not looked at (model_om2.cpp)."""
        _size_t(index, "index")
        gears = self.described(desc).gears
        hw = [list(g) for g in gears.values] if gears and gears.kind == "hw" else []
        return {"hwCount": len(hw), "hw": hw}

    def _dims_gears(self, desc: object, index: object) -> tuple[ModelSpec, list[Any]]:
        spec = self.described(desc)
        if _size_t(index, "index") != SIZE_MAX:
            raise InvalidArgument(f"index must be -1 (reserved), got {index}")
        gears = spec.gears
        return spec, list(gears.values) if gears and gears.kind == "dims" else []

    def dynamic_gear_count(self, desc: object, index: object) -> int:
        """aclmdlGetInputDynamicGearCount: the dims gears (0 without); ``index`` must be -1."""
        return len(self._dims_gears(desc, index)[1])

    def dynamic_dims(self, desc: object, index: object, gear_count: object) -> list[Any]:
        """aclmdlGetInputDynamicDims: per gear, every data input's dims concatenated, the -1
        dims filled; ``gear_count`` entries (ones past the model's gears are empty, as the
        binding's zeroed array)."""
        count = _size_t(gear_count, "gear_count")
        spec, gears = self._dims_gears(desc, index)
        if count < len(gears):
            raise InvalidArgument(f"gear_count {count} is less than the model's "
                                  f"{len(gears)} dynamic dims gears")
        data = spec.inputs[:spec.shape_input]
        out = []
        for g in range(len(gears)):
            dims = [d for t in data for d in t.dims_at(g)]
            out.append({"name": "", "dimCount": len(dims), "dims": dims})
        out += [{"name": "", "dimCount": 0, "dims": []} for _ in range(count - len(gears))]
        return out

    def set_gear(self, model_id: object, dataset: object, index: object, kind: str,
                 values: tuple[int, ...]) -> None:
        """aclmdlSetDynamicBatchSize (``kind`` "batch"), aclmdlSetDynamicHWSize ("hw"),
        aclmdlSetInputDynamicDims ("dims", ``values`` every data input's dims): write the
        gear into the dynamic input's buffer, as GE does, and make it the model's and the
        dataset's current gear.

        Raises:
            InvalidArgument: a 0 value, no buffer at ``index`` or a NULL one (100000).
            DynamicInputLengthInvalid: the buffer is too small, or (dims) the dims do not
                match the inputs' (145012).
            DynamicGearInvalid: no gear of the model (145013).
            InvalidModelId: the model is not loaded.
        """
        ds = self.handles.get(dataset, Dataset, "dataset")
        i = _size_t(index, "index")
        if kind != "dims" and 0 in values:
            raise InvalidArgument(f"{'batch size' if kind == 'batch' else 'height and width'} "
                                  f"must not be 0, got {list(values)}")
        if i >= len(ds.buffers):
            raise InvalidArgument(f"index {i} is outside the dataset's {len(ds.buffers)} "
                                  f"buffers")
        buf = self.handles.get(ds.buffers[i], DataBuffer, f"dataset buffer {i}")
        if not buf.addr:
            raise InvalidArgument(f"dataset buffer {i} has a NULL address")
        model = self.model(model_id)
        gears = model.spec.gears
        if kind == "dims":
            values = self._dynamic_values(model.spec, values)
        # ge_executor.cc: the buffer holds the values as uint32 (uint64 if it is that large)
        need = 4 * (1 if kind == "batch" else 2 if kind == "hw" else len(values))
        short = DynamicInputLengthInvalid(f"the dynamic input buffer holds {buf.nbytes} "
                                          f"bytes, less than the {need} its values take")
        # GE checks the length before the gear for a batch or image size, after it for dims
        if buf.nbytes < need and kind != "dims":
            raise short
        gear = gears.index(values) if gears is not None and gears.kind == kind else None
        if gear is None:
            what = "no gears" if gears is None else gears.describe()
            raise DynamicGearInvalid(f"{list(values)} is not a gear of model "
                                     f"{model.model_id} ({what})")
        if buf.nbytes < need:
            raise short
        # a gear's values are below 2**31 (gears.py), so they fit either width
        width = 8 if buf.nbytes >= 2 * need else 4
        raw = b"".join(v.to_bytes(width, "little") for v in values)
        self.runtime.data.write_bytes(_SET_CALLS[kind], buf.addr, raw)
        with self.handles.lock:
            model.gear = gear
            ds.gear = (kind, values)

    @staticmethod
    def _dynamic_values(spec: ModelSpec, dims: tuple[int, ...]) -> tuple[int, ...]:
        """The -1 dims' values in ``dims``, every data input's dims in order
        (ge_executor.cc ``GetCurDynamicDims``).

        Raises:
            DynamicInputLengthInvalid: another count, or a static dim that differs.
        """
        data = spec.inputs if spec.gears is None else spec.inputs[:spec.shape_input]
        declared = [d for t in data for d in t.dims]
        if len(dims) != len(declared):
            raise DynamicInputLengthInvalid(f"dims has {len(dims)} values, the model's inputs "
                                            f"have {len(declared)} dims in all")
        out = []
        for j, (got, want) in enumerate(zip(dims, declared)):
            if want < 0:
                out.append(got)
            elif got != want:
                raise DynamicInputLengthInvalid(f"dims[{j}] is {got}, but that dim is static: "
                                                f"{want}")
        return tuple(out)

    def cur_output_dims(self, desc: object, index: object) -> dict[str, Any]:
        """aclmdlGetCurOutputDims: the output's dims at the model's current gear (before any
        set call, or for a static model: its dims)."""
        target = self.handles.get(desc, ModelDesc, "model_desc")
        t = self.tensor(desc, index, True)
        model = target.model
        gear = model.gear if model is not None else None
        return {"name": t.name, "dimCount": len(t.dims_at(gear)), "dims": list(t.dims_at(gear))}

    # -- datasets --------------------------------------------------------------------------

    def set_dataset_desc(self, dataset: object, desc: object, index: object) -> None:
        """aclmdlSetDatasetTensorDesc: the dataset keeps a copy of ``desc`` at ``index``
        (``desc`` 0 removes it)."""
        ds = self.handles.get(dataset, Dataset, "dataset")
        i = _size_t(index, "index")
        if i >= len(ds.buffers):
            raise InvalidArgument(f"index {i} is outside the dataset's {len(ds.buffers)} "
                                  f"buffers")
        source = None if desc == 0 else self.handles.get(desc, TensorDesc, "tensor_desc")
        with self.handles.lock:
            mine = ds.descs.get(i)
            if source is None:
                if mine is not None:
                    del ds.descs[i]
                    self.handles.remove(mine.handle, DatasetTensorDesc)
                return
            if mine is None:
                mine = ds.descs[i] = self.handles.add(DatasetTensorDesc())
            mine.dtype, mine.dims, mine.format = source.dtype, source.dims, source.format
            mine.name = source.name

    def dataset_desc(self, dataset: object, index: object) -> int:
        """aclmdlGetDatasetTensorDesc: the dataset's descriptor at ``index`` (0: none)."""
        ds = self.handles.get(dataset, Dataset, "dataset")
        i = _size_t(index, "index")
        if i >= len(ds.buffers):
            raise InvalidArgument(f"index {i} is outside the dataset's {len(ds.buffers)} "
                                  f"buffers")
        mine = ds.descs.get(i)
        return 0 if mine is None else mine.handle

    def destroy_dataset(self, dataset: object) -> None:
        """aclmdlDestroyDataset: the dataset and its descriptor copies; its data buffers stay."""
        with self.handles.lock:
            ds = self.handles.remove(dataset, Dataset, "dataset")
            for mine in ds.descs.values():
                self.handles.remove(mine.handle, DatasetTensorDesc)

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
        return cast("int", ds.buffers[i])

    # -- execution -------------------------------------------------------------------------

    def _operands(self, ds: Dataset, tensors: tuple[TensorSpec, ...], what: str,
                  mismatch: type, gear: int | None) -> list[Operand]:
        if len(ds.buffers) != len(tensors):
            raise mismatch(f"the {what} dataset holds {len(ds.buffers)} buffers, the model "
                           f"has {len(tensors)} {what}s")
        operands = []
        for i, (h, t) in enumerate(zip(ds.buffers, tensors)):
            buf = self.handles.get(h, DataBuffer, f"{what} buffer {i}")
            dims = t.dims_at(gear)
            nbytes = nbytes_of(dims, t.dtype)
            if buf.nbytes < nbytes or (nbytes and not buf.addr):
                at = "" if dims == t.dims else f" at its gear {list(dims)}"
                raise mismatch(f"{what} buffer {i} ({t.name}) holds {buf.nbytes} bytes, the "
                               f"model's {what}{at} needs {nbytes}")
            operands.append(Operand(f"{what} {i} ({t.name})", buf.addr, nbytes, t.dtype, dims))
        return operands

    def _gear(self, spec: ModelSpec, ds: Dataset) -> int:
        """The gear an execution runs: the input dataset's, set by a set call; else the
        values the dynamic input's memory holds (DECISION: read when the call is made; on
        hardware the model reads them when it runs).

        Raises:
            DynamicGearInvalid: neither names a gear of the model.
        """
        gears, index = spec.gears, spec.shape_input
        assert gears is not None and index is not None  # a dynamic model's (see execute)
        if ds.gear is not None and ds.gear[0] == gears.kind:
            values = ds.gear[1]
        else:
            if index >= len(ds.buffers):
                values = ()
            else:
                buf = self.handles.get(ds.buffers[index], DataBuffer, f"input buffer {index}")
                values = self._read_gear(buf, gears.width)
        gear = gears.index(values)
        if gear is None:
            raise DynamicGearInvalid(
                f"the input dataset's dynamic input ({spec.inputs[index].name}) "
                f"holds {list(values)}, no gear of the model ({gears.describe()}): choose "
                f"one with aclmdlSetDynamicBatchSize, aclmdlSetDynamicHWSize or "
                f"aclmdlSetInputDynamicDims before executing")
        return gear

    def _read_gear(self, buf: DataBuffer, width: int) -> tuple[int, ...]:
        """The int32 values at the start of the dynamic input's memory (() if unreadable or
        never written: the sanitizer reports that read when the model runs)."""
        if buf.nbytes < 4 * width or not buf.addr:
            return ()
        data = self.runtime.data
        try:
            with data.lock:
                region, offset = data.resolve("aclmdlExecute", buf.addr, 4 * width, write=False,
                                              deferred=True)
                if region.first_gap(offset, 4 * width) is not None:
                    return ()
                raw = bytearray(4 * width)
                region.read_into(offset, memoryview(raw))
        except AclError:
            return ()
        return tuple(int.from_bytes(raw[4 * k:4 * k + 4], "little") for k in range(width))

    def execute(self, model_id: object, inputs: object, outputs: object,
                stream: object = None) -> None:
        """aclmdlExecute (``stream`` None: now) or aclmdlExecuteAsync (queued)."""
        model = self.model(model_id)
        spec = model.spec
        ds_in = self.handles.get(inputs, Dataset, "input dataset")
        ds_out = self.handles.get(outputs, Dataset, "output dataset")
        gear = None if spec.gears is None else self._gear(spec, ds_in)
        ins = self._operands(ds_in, spec.inputs, "input", ModelInputMismatch, gear)
        outs = self._operands(ds_out, spec.outputs, "output", ModelOutputMismatch, gear)
        for t in (*spec.inputs, *spec.outputs):
            numpy_dtype(t.dtype)
        fn = spec.fn or _default_fn(spec, gear)
        if gear is not None:
            fn = _without_shape_input(fn, spec.shape_input)  # type: ignore[arg-type]  # dynamic
        call = "aclmdlExecute" if stream is None else "aclmdlExecuteAsync"
        name = f"model {model.model_id} function {getattr(fn, '__name__', fn)!r}"
        ptr = launch(self.runtime, call, stream, ins, outs, fn, name,
                     mismatch=ModelOutputMismatch, workspace=spec.work_bytes,
                     allocator=self.plane.model_allocator, advise=model.work_ptr)
        if ptr is not None:
            model.work_ptr = ptr

    def close(self) -> None:
        self._loaded.clear()


_SET_CALLS = {"batch": "aclmdlSetDynamicBatchSize", "hw": "aclmdlSetDynamicHWSize",
              "dims": "aclmdlSetInputDynamicDims"}


def _size_t(value: object, name: str) -> int:
    """A C ``size_t`` argument as pyacl's ``"k"`` takes it: a negative int wraps (so the
    reserved index -1 is SIZE_MAX)."""
    return as_int(value, name, -(1 << 63), SIZE_MAX) & SIZE_MAX


def _without_shape_input(fn: Callable[[list[Any]], object], index: int) -> Callable[[list[Any]],
                         object]:
    """``fn`` called without the ``ascend_mbatch_shape_data`` array (DECISION: a stand-in's
    function gets the data inputs, shaped at the gear, as a static model's gets its inputs)."""

    def call(arrays: list[Any]) -> object:
        return fn(arrays[:index] + arrays[index + 1:])

    call.__name__ = getattr(fn, "__name__", "fn")
    return call


def _default_fn(spec: ModelSpec, gear: int | None = None) -> Callable[[list[Any]], list[Any]]:
    """Outputs filled from a generator seeded with the inputs' bytes."""

    def fill(arrays: list[Any]) -> list[Any]:
        np = require_numpy()
        seed = 0
        for a in arrays:
            seed = zlib.crc32(a.tobytes(), seed)
        rng = np.random.default_rng(seed)
        outs = []
        for t in spec.outputs:
            dtype = numpy_dtype(t.dtype)
            dims = t.dims_at(gear)
            if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
                outs.append(rng.integers(0, 2 if dtype == np.bool_ else 100, dims)
                            .astype(dtype))
            else:
                outs.append(rng.random(dims).astype(dtype))
        return outs

    fill.__name__ = "default (seeded by the inputs)"
    return fill
