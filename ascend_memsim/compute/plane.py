"""The compute plane of one runtime: data buffers, tensor descriptors and operators.

The runtime does not know this layer: the plane is made on first use through
``Runtime.extension("compute", ComputePlane)`` (see :func:`compute_plane`), and at aclFinalize
the runtime asks it for the handles still live, which the sanitizer reports as leaks. Models
live in :mod:`.models`, on the same handle table.
"""

from __future__ import annotations

from typing import Any, Literal, cast, overload

from ..data import pointers as _pointers
from ..memory.args import SIZE_MAX, as_int, as_str, int_or_none
from ..memory.constants import DATA_TYPE_BITS, UNKNOWN_RANK, DataType, Format
from ..memory.errors import (
    InvalidArgument,
    OpInputMismatch,
    OpOutputMismatch,
)
from .launch import Operand, OutputSpec, launch
from .ops import OpAttr, OpHandle, find_kernel, set_attr
from .symbols import symbols
from .tensors import (
    DataBuffer,
    Handle,
    HandleTable,
    Layout,
    TensorDesc,
    as_list,
    data_type,
    make_tensor_desc,
    numpy_dtype,
)

__all__ = ["ComputePlane", "compute_plane"]


@overload
def compute_plane(runtime: Any, make: Literal[True] = True) -> ComputePlane: ...
@overload
def compute_plane(runtime: Any, make: bool) -> ComputePlane | None: ...


def compute_plane(runtime: Any, make: bool = True) -> ComputePlane | None:
    """The runtime's compute plane, made on first use (``make=False``: None if the runtime
    has none yet; nothing is made)."""
    return cast("ComputePlane | None", runtime.extension("compute", ComputePlane if make else None))


class ComputePlane:
    """Handles and operator launches of one runtime (thread-safe: the table's lock)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        sanitizer = runtime.sanitizer
        self.handles = HandleTable(lambda: sanitizer.on and sanitizer.record_sites)
        #: acl.op.set_model_dir's directory (recorded; the kernels stand in for the models)
        self.model_dir: str | None = None
        #: acl.mdl's models (made by .models on first use)
        self.models: Any = None
        #: streams whose first operator ran with no allocator registered: the graph engine
        #: keeps its own allocator for them for good (see _op_allocator)
        self._engine_streams: set[int] = set()

    def close(self) -> list[Handle]:
        """Forget every handle (aclFinalize); the ones never destroyed."""
        return self.handles.clear()

    # -- data buffers (aclCreateDataBuffer, ...) --------------------------------------------

    def create_data_buffer(self, addr: object, size: object) -> int:
        """aclCreateDataBuffer: wrap ``size`` bytes at ``addr`` (the memory stays the caller's).

        Docs (aclpythondevg_01_0016): data 0 makes an empty buffer, whose size must be 0.

        Raises:
            InvalidArgument, InvalidArgumentType: a bad address or size.
        """
        addr = as_int(addr, "data", 0, SIZE_MAX)
        size = as_int(size, "size", 0, SIZE_MAX)
        if addr == 0 and size:
            raise InvalidArgument(f"an empty data buffer (data 0) must have size 0, got {size}")
        return self.handles.add(DataBuffer(addr=addr, nbytes=size)).handle

    def data_buffer(self, handle: object) -> DataBuffer:
        return self.handles.get(handle, DataBuffer, "data_buffer")

    def destroy_data_buffer(self, handle: object) -> None:
        """aclDestroyDataBuffer: the wrapper only; the memory is the caller's to free."""
        self.handles.remove(handle, DataBuffer, "data_buffer")

    def update_data_buffer(self, handle: object, addr: object, size: object) -> None:
        """aclUpdateDataBuffer: point the buffer at other memory (checked first)."""
        buffer = self.data_buffer(handle)
        addr = as_int(addr, "data", 0, SIZE_MAX)
        size = as_int(size, "size", 0, SIZE_MAX)
        if addr == 0 and size:
            raise InvalidArgument(f"an empty data buffer (data 0) must have size 0, got {size}")
        with self.handles.lock:
            buffer.addr, buffer.nbytes = addr, size

    # -- tensor descriptors -----------------------------------------------------------------

    def create_tensor_desc(self, dtype: object, dims: object, fmt: object) -> int:
        """aclCreateTensorDesc (dims a list; [] is a scalar)."""
        return self.handles.add(make_tensor_desc(dtype, dims, fmt)).handle

    def tensor_desc(self, handle: object) -> TensorDesc:
        return self.handles.get(handle, TensorDesc, "tensor_desc")

    def destroy_tensor_desc(self, handle: object) -> None:
        """aclDestroyTensorDesc. DECISION: a descriptor another object owns (a dataset's copy,
        aclmdlGetDatasetTensorDesc) is refused (100000): freeing it would free it twice."""
        with self.handles.lock:
            desc = self.tensor_desc(handle)
            if desc.destroyed_by != TensorDesc.destroyed_by:
                raise InvalidArgument(f"tensor_desc {desc.handle:#x} is a {desc.kind}, freed by "
                                      f"{desc.destroyed_by}; aclDestroyTensorDesc would free it "
                                      f"twice")
            self.handles.remove(handle, TensorDesc, "tensor_desc")

    def num_dims(self, handle: object) -> int:
        desc = self.tensor_desc(handle)
        return UNKNOWN_RANK if desc.dims == (-2,) else len(desc.dims)

    def dim(self, handle: object, index: object) -> int:
        """aclGetTensorDescDimV2: the dim at ``index``.

        Raises:
            InvalidArgument: an index outside the dims.
        """
        desc = self.tensor_desc(handle)
        i = as_int(index, "index", 0, SIZE_MAX)
        if i >= len(desc.dims):
            raise InvalidArgument(f"index {i} is outside the {len(desc.dims)} dims of "
                                  f"{desc.spec()}")
        return desc.dims[i]

    @staticmethod
    def data_type_size(dtype: object) -> int:
        """aclDataTypeSize: bytes of one element (DECISION: a sub-byte type gives 1, rounded
        up; ACL_STRING gives 0)."""
        bits = DATA_TYPE_BITS.get(data_type(dtype), 0)
        return -(-bits // 8)

    def set_tensor_desc_name(self, handle: object, name: object) -> None:
        self.tensor_desc(handle).name = as_str(name, "name", empty=True)

    def set_tensor_shape(self, handle: object, dims: object) -> None:
        desc = self.tensor_desc(handle)
        fresh = make_tensor_desc(desc.dtype, dims, desc.format)
        desc.dims = fresh.dims

    def set_tensor_const(self, handle: object, ptr: object, size: object) -> None:
        """aclSetTensorConst: the descriptor keeps a copy of ``size`` bytes at ``ptr`` as its
        constant value (hicann/ge ``tensor_desc_internal_om2.cpp``: NULL data or size 0 is
        ACL_ERROR_INVALID_PARAM). DECISION: host memory the simulator knows (the docs ask
        host memory in the EP form), device memory in the device run mode; kernels read their
        input buffers, not this copy.

        Raises:
            InvalidArgument: a NULL ``ptr`` or a 0 ``size``.
            InvalidPointer: memory the host cannot read.
        """
        desc = self.tensor_desc(handle)
        address = as_int(ptr, "data", 0, SIZE_MAX)
        count = as_int(size, "size", 0, SIZE_MAX)
        if not address or not count:
            raise InvalidArgument(f"aclSetTensorConst needs data and a size, got data "
                                  f"{address:#x}, size {count}")
        desc.const = _pointers.ptr_to_bytes(self.runtime, address, count)

    def set_tensor_format(self, handle: object, fmt: object) -> None:
        desc = self.tensor_desc(handle)
        fmt = as_int(fmt, "format", -(1 << 31), (1 << 31) - 1)
        if fmt not in Format._value2member_map_:
            raise InvalidArgument(f"format {fmt} is not an aclFormat")
        desc.format = fmt

    # -- operators (acl.op) -----------------------------------------------------------------

    def set_model_dir(self, path: object) -> None:
        self.model_dir = as_str(path, "model_dir")

    def create_attr(self) -> int:
        return self.handles.add(OpAttr()).handle

    def attr(self, handle: object) -> OpAttr:
        return self.handles.get(handle, OpAttr, "attr")

    def destroy_attr(self, handle: object) -> None:
        self.handles.remove(handle, OpAttr, "attr")

    def set_attr(self, handle: object, kind: str, name: object, value: object) -> None:
        attr = self.attr(handle)
        with self.handles.lock:
            set_attr(attr, kind, name, value)

    def _attrs(self, handle: object) -> dict[str, Any]:
        """A copy of the attribute values (0 or None: no attributes)."""
        if handle is None or int_or_none(handle) == 0:
            return {}
        return dict(self.attr(handle).values)

    def _descs(self, handles: object, what: str) -> list[Layout]:
        """Snapshots of the descriptors (later changes do not affect queued work)."""
        descs = []
        get = self.handles.get
        for i, h in enumerate(as_list(handles, what)):
            layout = get(h, TensorDesc, what).layout()
            if not layout.static:
                raise OpInputMismatch(f"{what}[{i}] has a dynamic shape {list(layout.dims)}; "
                                      f"the simulator runs static shapes only")
            numpy_dtype(layout.dtype)
            descs.append(layout)
        return descs

    def _operands(self, descs: list[Layout], buffers: object, what: str,
                  mismatch: type) -> list[Operand]:
        buffers = as_list(buffers, what)
        if len(buffers) != len(descs):
            raise mismatch(f"{len(buffers)} {what} for {len(descs)} descriptors")
        operands = []
        get = self.handles.get
        for i, (desc, h) in enumerate(zip(descs, buffers)):
            buffer = get(h, DataBuffer, what)
            need = desc.nbytes
            if buffer.nbytes < need:
                raise mismatch(f"{what}[{i}] holds {buffer.nbytes} bytes, but its descriptor "
                               f"{desc.spec()} needs {need}")
            if need and not buffer.addr:
                raise mismatch(f"{what}[{i}] is an empty buffer, but its descriptor "
                               f"{desc.spec()} needs {need} bytes")
            operands.append(Operand(f"{what}[{i}]", buffer.addr, need, desc.dtype, desc.dims))
        return operands

    def execute(self, op_type: object, input_desc: object, inputs: object,
                output_desc: object, outputs: object, attr: object, stream: object,
                call: str = "aclopExecuteV2") -> None:
        """aclopExecuteV2: check everything now, run the kernel at synchronisation."""
        kernel = find_kernel(op_type)
        in_descs = self._descs(input_desc, "input_desc")
        out_descs = self._descs(output_desc, "output_desc")
        self._launch(call, kernel, in_descs, out_descs, self._attrs(attr), inputs, outputs,
                     stream)

    def _launch(self, call: str, kernel: Any, in_descs: list[Layout],
                out_descs: list[Layout], attrs: dict[str, Any], inputs: object, outputs: object,
                stream: object) -> None:
        ins = self._operands(in_descs, inputs, "inputs", OpInputMismatch)
        outs = self._operands(out_descs, outputs, "outputs", OpOutputMismatch)
        specs = [OutputSpec(d.dims, numpy_dtype(d.dtype)) for d in out_descs]
        name = f"kernel {kernel.name!r}" + (" (built-in)" if kernel.builtin else "")
        workspace = kernel.workspace and kernel.workspace_for(
            [OutputSpec(d.dims, numpy_dtype(d.dtype)) for d in in_descs], attrs)
        if not kernel.variables:
            launch(self.runtime, call, stream, ins, outs,
                   lambda arrays: kernel(arrays, dict(attrs), specs), name,
                   workspace=workspace, allocator=self.operator_allocator)
            return
        # the kernel's device variables (11-11), loaded on the current device if need be;
        # given back if the launch fails (a failed call changes nothing)
        device = self.runtime.current_device()
        table = symbols(self.runtime)
        fresh, variables = [], []
        try:
            for v in kernel.variables:
                ptr, loaded_now = table.loaded(v, device)
                if loaded_now:
                    fresh.append(v)
                variables.append((v.name, Operand(f"device variable {v.name!r}", ptr, v.size,
                                                  DataType.UINT8, (v.size,))))
            launch(self.runtime, call, stream, ins, outs,
                   lambda arrays, values: kernel(arrays, dict(attrs), specs, values), name,
                   variables=variables, workspace=workspace,
                   allocator=self.operator_allocator)
        except BaseException:
            for v in fresh:
                table.unload(v, device)
            raise

    def operator_allocator(self, stream: Any) -> Any:
        """The allocator registered on ``stream`` that an operator's workspace comes from,
        or None. As hicann/ge ``AclResourceManager::GetAllocators`` does for single operators:
        a stream whose first operator ran with none registered keeps the engine's own
        allocator for the rest of its life, even if one is registered later (11-08: register
        before aclopExecuteV2)."""
        reg = self.model_allocator(stream)
        if reg is None:
            with self.handles.lock:
                self._engine_streams.add(stream.handle)
        return reg

    def model_allocator(self, stream: Any) -> Any:
        """The allocator registered on ``stream`` that a model's work memory comes from, or
        None: none registered, or the engine keeps its own for the stream (see
        :meth:`operator_allocator`; GetAllocators looks at that first, for models too)."""
        handle = stream.handle
        if handle in self._engine_streams:
            return None
        return self.runtime.custom_allocators.registered.get(handle)

    def create_handle(self, op_type: object, input_desc: object, output_desc: object,
                      attr: object) -> int:
        """aclopCreateHandle: the op type, descriptors and attributes, fixed now."""
        kernel = find_kernel(op_type)
        # find_kernel checked op_type is a str
        handle = OpHandle(op_type=op_type, kernel=kernel,  # type: ignore[arg-type]
                          inputs=tuple(self._descs(input_desc, "input_desc")),
                          outputs=tuple(self._descs(output_desc, "output_desc")),
                          attrs=self._attrs(attr))
        return self.handles.add(handle).handle

    def execute_with_handle(self, handle: object, inputs: object, outputs: object,
                            stream: object) -> None:
        op = self.handles.get(handle, OpHandle, "handle")
        self._launch("aclopExecWithHandle", op.kernel, list(op.inputs), list(op.outputs),
                     op.attrs, inputs, outputs, stream)

    def destroy_handle(self, handle: object) -> None:
        self.handles.remove(handle, OpHandle, "handle")

    def cast(self, src_desc: object, src_buf: object, dst_desc: object, dst_buf: object,
             truncate: object, stream: object) -> None:
        """aclopCast: the built-in Cast kernel (unless one is registered)."""
        truncate = as_int(truncate, "truncate", 0, 255)
        kernel = find_kernel("Cast")
        in_descs = self._descs([src_desc], "src_desc")
        out_descs = self._descs([dst_desc], "dst_desc")
        attrs = {"dst_type": DataType(out_descs[0].dtype), "truncate": bool(truncate)}
        self._launch("aclopCast", kernel, in_descs, out_descs, attrs, [src_buf], [dst_buf],
                     stream)
