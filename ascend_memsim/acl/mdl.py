"""acl.mdl: models described by stand-ins (``<model>.memsim.json`` or register_model):
loading, descriptions, datasets, execution.

Signatures and return shapes follow hicann/runtime python/pyACL/mdl/mdl_wrap.cpp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..compute.models import Dataset, ModelDesc, Models, spec_for_bytes, spec_for_file
from ..data import pointers as _pointers
from ..memory.args import as_int
from ..runtime.active import current_runtime
from ._face import compute as _compute
from ._face import face as _face
from ._face import face_dir as _face_dir
from ._pyacl import io_dims


def _models() -> Models:
    plane = _compute()
    if plane.models is None:
        with plane.handles.lock:
            if plane.models is None:
                plane.models = Models(plane)
    return plane.models


def _host_bytes(ptr: Any, size: Any) -> bytes:
    return _pointers.ptr_to_bytes(current_runtime(), ptr, size)


@_face(0)
def load_from_file(model_path: str) -> int:
    return _models().load(spec_for_file(model_path))


@_face(0)
def load_from_mem(model: int, model_size: int) -> int:
    return _models().load(spec_for_bytes(_host_bytes(model, model_size)))


@_face(0)
def load_from_file_with_mem(model_path: str, work_ptr: int, work_size: int, weight_ptr: int,
                            weight_size: int) -> int:
    return _models().load(spec_for_file(model_path),
                          (work_ptr, work_size, weight_ptr, weight_size))


@_face(0)
def load_from_mem_with_mem(model: int, model_size: int, work_ptr: int, work_size: int,
                           weight_ptr: int, weight_size: int) -> int:
    return _models().load(spec_for_bytes(_host_bytes(model, model_size)),
                          (work_ptr, work_size, weight_ptr, weight_size))


@_face(0, 0)
def query_size(file_name: str) -> tuple[int, int]:
    spec = spec_for_file(file_name)
    return spec.work_bytes, spec.weight_bytes


@_face(0, 0)
def query_size_from_mem(model: int, model_size: int) -> tuple[int, int]:
    spec = spec_for_bytes(_host_bytes(model, model_size))
    return spec.work_bytes, spec.weight_bytes


@_face()
def unload(model_id: int) -> None:
    _models().unload(model_id)


@_face(0, bare=True)
def create_desc() -> int:
    return _compute().handles.add(ModelDesc()).handle


@_face()
def get_desc(model_desc: int, model_id: int) -> None:
    _models().get_desc(model_desc, model_id)


@_face()
def destroy_desc(model_desc: int) -> None:
    _compute().handles.remove(model_desc, ModelDesc, "model_desc")


@_face(0, bare=True)
def get_num_inputs(model_desc: int) -> int:
    return len(_models().described(model_desc).inputs)


@_face(0, bare=True)
def get_num_outputs(model_desc: int) -> int:
    return len(_models().described(model_desc).outputs)


def _io(name: str, outputs: bool, what: str, default: Any, read: Callable[[Any], Any],
        bare: bool = True) -> Callable[..., Any]:
    @_face(default, bare=bare)
    def query(model_desc: int, index: int) -> Any:
        return read(_models().tensor(model_desc, index, outputs))

    query.__name__ = query.__qualname__ = name
    query.__doc__ = f"aclmdl{what}."
    return query


_IO_QUERIES = [
    _io(f"get_{side}_{kind}", side == "output", f"Get{side.title()}{label}", default, read,
        bare)
    for side in ("input", "output")
    for kind, label, default, read, bare in (
        ("size_by_index", "SizeByIndex", 0, lambda t: t.nbytes, True),
        ("dims", "Dims", {}, lambda t: t.dims_dict(), False),
        ("data_type", "DataType", -1, lambda t: int(t.dtype), True),
        ("format", "Format", -1, lambda t: t.format, True),
        ("name_by_index", "NameByIndex", "", lambda t: t.name, True),
    )
] + [
    _io("get_input_dims_v2", False, "GetInputDimsV2", {}, lambda t: t.dims_dict(), False),
]


@_face(0)
def get_input_index_by_name(model_desc: int, name: str) -> int:
    return _models().index_by_name(model_desc, name, outputs=False)


@_face(0)
def get_output_index_by_name(model_desc: int, name: str) -> int:
    return _models().index_by_name(model_desc, name, outputs=True)


@_face({})
def get_dynamic_batch(model_desc: int) -> dict:
    """``{"batchCount", "batch"}``; ``batchCount`` 0 for a model without batch gears."""
    return _models().dynamic_batch(model_desc)


@_face({})
def get_dynamic_hw(model_desc: int, index: int) -> dict:
    """``{"hwCount", "hw": [[h, w], ...]}``; ``index`` is reserved (-1)."""
    return _models().dynamic_hw(model_desc, index)


@_face(0)
def get_input_dynamic_gear_count(model_desc: int, index: int) -> int:
    """The dynamic dims gears (0 without); ``index`` must be -1."""
    return _models().dynamic_gear_count(model_desc, index)


@_face(None)
def get_input_dynamic_dims(model_desc: int, index: int, gear_count: int) -> list:
    # mdl_wrap.cpp: a gear_count over 4096 is refused before the call
    as_int(gear_count, "gear_count", 0, 4096)
    return _models().dynamic_dims(model_desc, index, gear_count)


@_face()
def set_dynamic_batch_size(model_id: int, dataset: int, index: int, batch_size: int) -> None:
    """aclmdlSetDynamicBatchSize: ``index`` is the ascend_mbatch_shape_data input's."""
    _models().set_gear(model_id, dataset, index, "batch", (_u64(batch_size, "batch_size"),))


@_face()
def set_dynamic_hw_size(model_id: int, dataset: int, index: int, height: int,
                        width: int) -> None:
    _models().set_gear(model_id, dataset, index, "hw",
                       (_u64(height, "height"), _u64(width, "width")))


@_face()
def set_input_dynamic_dims(model_id: int, dataset: int, index: int, dims: dict) -> None:
    """``dims``: ``{"name": "", "dimCount": n, "dims": [...]}``, every data input's dims."""
    _models().set_gear(model_id, dataset, index, "dims", io_dims(dims))


def _u64(value: object, name: str) -> int:
    """A uint64_t as pyacl's ``"K"`` takes it (no overflow check: a negative int wraps)."""
    return as_int(value, name, -(1 << 63), (1 << 64) - 1) & ((1 << 64) - 1)


@_face({})
def get_cur_output_dims(model_desc: int, index: int) -> dict:
    """The output's dims at the model's current gear."""
    return _models().cur_output_dims(model_desc, index)


@_face(0, bare=True)
def create_dataset() -> int:
    return _compute().handles.add(Dataset()).handle


def add_dataset_buffer(dataset: int, data_buffer: int, /) -> tuple[int, int]:
    """aclmdlAddDatasetBuffer: ``dataset, ret`` (pyacl returns the dataset too)."""
    return dataset, _add_dataset_buffer(dataset, data_buffer)


@_face()
def _add_dataset_buffer(dataset: int, data_buffer: int) -> None:
    _models().add_buffer(dataset, data_buffer)


@_face(0, bare=True)
def get_dataset_num_buffers(dataset: int) -> int:
    return len(_compute().handles.get(dataset, Dataset, "dataset").buffers)


@_face(0, bare=True)
def get_dataset_buffer(dataset: int, index: int) -> int:
    return _models().dataset_buffer(dataset, index)


@_face()
def destroy_dataset(dataset: int) -> None:
    """The dataset only; its data buffers stay (destroy them with destroy_data_buffer)."""
    _models().destroy_dataset(dataset)


def set_dataset_tensor_desc(dataset: int, tensor_desc: int, index: int, /) -> tuple[int, int]:
    """aclmdlSetDatasetTensorDesc: ``dataset, ret`` (pyacl returns the dataset too); the
    dataset keeps a copy (``tensor_desc`` 0 removes it)."""
    return dataset, _set_dataset_tensor_desc(dataset, tensor_desc, index)


@_face()
def _set_dataset_tensor_desc(dataset: int, tensor_desc: int, index: int) -> None:
    _models().set_dataset_desc(dataset, tensor_desc, index)


@_face(0, bare=True)
def get_dataset_tensor_desc(dataset: int, index: int) -> int:
    """aclmdlGetDatasetTensorDesc: the dataset's copy (0: none, or an error)."""
    return _models().dataset_desc(dataset, index)


@_face()
def execute(model_id: int, input: int, output: int) -> None:
    """aclmdlExecute: synchronous."""
    _models().execute(model_id, input, output)


@_face()
def execute_async(model_id: int, input: int, output: int, stream: int) -> None:
    """aclmdlExecuteAsync: queued on ``stream``, run when it is synchronised."""
    _models().execute(model_id, input, output, stream)


_EXPORTS = (
    load_from_file, load_from_mem, load_from_file_with_mem,
    load_from_mem_with_mem, query_size, query_size_from_mem, unload, create_desc, get_desc,
    destroy_desc, get_num_inputs, get_num_outputs, *_IO_QUERIES, get_input_index_by_name,
    get_output_index_by_name, get_dynamic_batch, get_dynamic_hw, get_input_dynamic_gear_count,
    get_input_dynamic_dims, set_dynamic_batch_size, set_dynamic_hw_size,
    set_input_dynamic_dims, get_cur_output_dims, create_dataset, add_dataset_buffer,
    get_dataset_num_buffers, get_dataset_buffer, destroy_dataset, set_dataset_tensor_desc,
    get_dataset_tensor_desc, execute, execute_async,
)
# The generated queries and setters become module attributes, as pyacl has them.
globals().update({fn.__name__: fn for fn in _EXPORTS})
if TYPE_CHECKING:
    # (the checker does not see the names made above)
    def __getattr__(name: str) -> Any: ...
__all__ = [fn.__name__ for fn in _EXPORTS]

__dir__ = _face_dir(globals())
