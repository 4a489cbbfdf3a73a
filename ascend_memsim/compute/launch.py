"""Queued compute: operands checked at launch, read, computed and written at synchronisation.

An operator or model launch names its operands as :class:`Operand` (address, bytes, data type,
dims). :func:`launch` checks them at once (a failed check queues nothing and changes
nothing), then queues the work on the stream as ``memcpy_async`` does; it runs when the
program synchronises, in stream order:

* every operand must be live device memory of the calling thread's current device, and its
  buffer must hold what its descriptor describes (host memory or another device's block is
  ACL_ERROR_RT_PARAM_INVALID 107000 and a ``wrong-memory`` sanitizer report; host memory is
  accepted when the runtime's run mode is ACL_DEVICE);
* when the work runs, inputs are read through the data plane (the sanitizer's initcheck
  reports bytes never written), outputs freed meanwhile fail (use after free; the free itself
  was reported as ``free-with-pending-work``), the function is called with numpy arrays
  shaped and typed by the descriptors, and what it returns is checked against the output
  descriptors before anything is written;
* a function that raises is reported (``kernel-error``, with its traceback) and makes the
  synchronising call return ACL_ERROR_RT_AICORE_EXCEPTION 507015 (DECISION: the code the
  runtime gives a faulting kernel); wrong outputs give ACL_ERROR_OP_OUTPUT_NOT_MATCH 100022.
  Either way no output is written.

Workspace (11-08): an operator or model that takes workspace, launched on a stream with a
registered allocator, asks that allocator for it after the operands are checked (the graph
engine's ExternalAllocator: ``alloc``, or ``alloc_advise`` for a model, then ``get_addr``), and
gives it back with ``free`` right after the work is queued, before the stream runs it (the
engine frees in stream order; 11-08 asks the program to synchronise the stream before its
allocator returns the memory to the system). A NULL block fails the launch with
ACL_ERROR_RT_MEMORY_ALLOCATION 207001 (DECISION: the engine only logs "Failed to malloc memory
by external allocator"); an address that is not live device memory of the current device
covering the workspace is refused as an operand is (the block is freed first). The work's
ranges include the workspace, so freeing it for real before the work ran is reported. Without
a registered allocator the workspace comes from the engine's own allocator, which the
simulator does not model (DECISION: nothing is charged).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..memory.constants import DataType, RunMode
from ..memory.errors import AclError, InvalidPointer, KernelError, OpOutputMismatch
from .tensors import numpy_dtype, require_numpy

__all__ = ["Operand", "OutputSpec", "launch"]


@dataclass(slots=True)
class Operand:
    """One input or output of queued compute: where, how many bytes, what it holds."""

    what: str
    addr: int
    nbytes: int
    dtype: DataType
    dims: tuple[int, ...]


@dataclass(slots=True)
class OutputSpec:
    """What an output must be: its shape and numpy dtype (given to kernels that ask)."""

    shape: tuple[int, ...]
    dtype: Any


def check_operand(runtime: Any, call: str, operand: Operand, write: bool,
                  device: Any = None) -> None:
    """Refuse an operand that is not live device memory of the current device.

    Raises:
        InvalidPointer: unknown, freed, too small, host memory or another device's memory.
        DeviceNotSet: no current device.
    """
    if operand.nbytes == 0:
        return
    if device is None:
        device = runtime.current_device()
    data = runtime.data
    with data.lock:
        region, _ = data.resolve(call, operand.addr, operand.nbytes, write=write, deferred=True)
        if region.host and runtime.run_mode is RunMode.DEVICE:
            return  # ACL_DEVICE: host and device memory are one (see parse_run_mode)
        if region.host:
            why = "operators and models take device memory (copy it with memcpy first)"
        elif region.block.device_id != device.device_id and not getattr(
                region, "managed", False):
            # DECISION: managed memory (11-05) is every device's: the runtime migrates it
            why = (f"it is memory of device {region.block.device_id}, but the current device "
                   f"is {device.device_id}")
        else:
            return
        runtime.sanitizer.wrong_memory(call, operand.addr, operand.nbytes, write, region, why)
    raise InvalidPointer(f"{call}: {operand.what} at {operand.addr:#x}: {why}")


def read_operand(runtime: Any, call: str, operand: Operand) -> Any:
    """The operand's bytes as a new, writable numpy array of its dtype and dims."""
    np = require_numpy()
    array = np.empty(operand.dims, numpy_dtype(operand.dtype))
    if operand.nbytes:
        data = runtime.data
        with data.lock:
            region, offset = data.resolve(call, operand.addr, operand.nbytes, write=False)
            region.read_into(offset, memoryview(array.reshape(-1)).cast("B"))
    return array


def write_operand(runtime: Any, call: str, operand: Operand, array: Any) -> None:
    """Store a checked result array into the operand's memory."""
    if not operand.nbytes:
        return
    np = require_numpy()
    flat = np.ascontiguousarray(array).reshape(-1)
    data = runtime.data
    with data.lock:
        region, offset = data.resolve(call, operand.addr, operand.nbytes, write=True)
        region.write(offset, memoryview(flat).cast("B"))


def check_results(call: str, results: object, outputs: Sequence[Operand],
                  mismatch: type = OpOutputMismatch) -> list[Any]:
    """The function's results as arrays matching the output operands exactly.

    Raises:
        OpOutputMismatch (or ``mismatch``): another count, shape or dtype.
    """
    np = require_numpy()
    if isinstance(results, (list, tuple)):
        results = list(results)
    else:
        results = [results]
    if len(results) != len(outputs):
        raise mismatch(f"{call}: the function returned {len(results)} output(s), the "
                               f"output descriptors describe {len(outputs)}")
    arrays = []
    for i, (result, out) in enumerate(zip(results, outputs)):
        array = np.asarray(result)
        want = numpy_dtype(out.dtype)
        if array.dtype != want or array.shape != tuple(out.dims):
            raise mismatch(
                f"{call}: output {i} is {array.dtype}{list(array.shape)}, but its descriptor "
                f"says {want}{list(out.dims)} (cast or reshape it in the function)")
        arrays.append(array)
    return arrays


def launch(runtime: Any, call: str, stream: object, inputs: Sequence[Operand],
           outputs: Sequence[Operand], compute: Callable[..., object],
           name: str, mismatch: type = OpOutputMismatch,
           variables: Sequence[tuple[str, Operand]] = (), *, workspace: int = 0,
           allocator: Callable[[Any], Any] | None = None,
           advise: int | None = None) -> int | None:
    """Check the operands now, queue ``compute(input arrays)`` on ``stream`` (None: run it
    now, for the synchronous calls). With device ``variables`` (name, operand) it is
    ``compute(input arrays, {name: uint8 array})``; the arrays are written back after the
    outputs, and only when the outputs were.

    ``allocator(stream)`` gives the registration whose allocator provides the ``workspace``
    bytes on that stream, or None (see the module docstring); ``advise``: ask with
    ``alloc_advise`` at that address. Returns the workspace's address, or None.

    Raises:
        InvalidPointer, DeviceNotSet: see :func:`check_operand`.
        InvalidHandle, StreamContextMismatch: a bad stream.
        OutOfDeviceMemory: the allocator gave no workspace.
    """
    streams = runtime.streams
    # a bad handle fails before the operands are looked at
    target = None if stream is None else streams.stream(stream)
    device = runtime.current_device()
    for operand in inputs:
        check_operand(runtime, call, operand, False, device)
    for operand in outputs:
        check_operand(runtime, call, operand, True, device)
    ranges = tuple((op.addr, op.addr + op.nbytes)
                   for op in (*inputs, *outputs, *(v for _, v in variables)) if op.nbytes)
    reg = blk = None
    if allocator is not None and target is not None and target.handle:
        reg = allocator(target)
        if reg is not None and workspace:
            blk = _take_workspace(runtime, call, reg, workspace, advise, device)
            ranges += ((blk.ptr, blk.ptr + workspace),)

    def run(_stream: Any) -> None:
        if blk is not None:
            # the workspace must still be the program's when the work runs
            data = runtime.data
            with data.lock:
                data.resolve(call, blk.ptr, blk.size, write=True)
        arrays = [read_operand(runtime, call, op) for op in inputs]
        values = {key: read_operand(runtime, call, op) for key, op in variables}
        try:
            # the kernel changes the arrays in place; a dict of its own to rebind freely
            results = compute(arrays, dict(values)) if variables else compute(arrays)
            checked = check_results(call, results, outputs, mismatch)
        except AclError as error:
            runtime.sanitizer.kernel_error(call, f"{name}: {error}")
            raise
        # SystemExit too: a kernel or model function must not end the program from inside
        # aclopExecute / aclmdlExecute; it fails the call like any other error in it.
        except (Exception, SystemExit) as error:
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            runtime.sanitizer.kernel_error(call, f"{name} raised:\n{text.rstrip()}")
            raise KernelError(f"{call}: {name} raised {type(error).__name__}: {error}\n"
                              f"{text.rstrip()}") from error
        for op, array in zip(outputs, checked):
            write_operand(runtime, call, op, array)
        for key, op in variables:
            write_operand(runtime, call, op, values[key])

    if target is None:
        run(None)
        return None
    if blk is None:
        streams.enqueue(target.handle, call, ranges, run)
        return None
    allocators = runtime.custom_allocators
    try:
        streams.enqueue(target.handle, call, ranges, run)
    except AclError:
        allocators.give_back(reg, blk)
        raise
    # queued: the engine gives the workspace back now, in stream order
    allocators.handed(reg, blk, call)
    allocators.free(reg, blk, call)
    return cast("int | None", blk.ptr)


def _take_workspace(runtime: Any, call: str, reg: Any, size: int, advise: int | None,
                    device: Any) -> Any:
    """``size`` bytes from the registered allocator ``reg``, checked as an output operand
    (a refused block is given back; nothing is told to the observers until the work is
    queued).

    Raises:
        OutOfDeviceMemory: no block. InvalidPointer: not device memory of ``device``.
    """
    allocators = runtime.custom_allocators
    blk = allocators.alloc(reg, size, call, advise)
    try:
        check_operand(runtime, call, Operand(f"the workspace from the allocator registered "
                                             f"on stream {reg.stream:#x}", blk.ptr, size,
                                             DataType.UINT8, (size,)), True, device)
    except AclError:
        allocators.give_back(reg, blk)
        raise
    return blk
