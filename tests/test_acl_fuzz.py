"""A fuzz test of the whole pyacl face: arbitrary arguments in arbitrary sequences.

Each example starts the face with an arbitrary ``acl.init`` config (good or bad), then
calls face functions with arguments of every kind: ints of every size, bools, floats, None,
str, bytes, containers, numpy scalars and arrays, hostile objects (an ``__index__`` that
raises something other than TypeError, a ``__repr__`` that raises), and pointers at, near
and inside live blocks and of other devices. Parameters that take a handle (stream,
context, event, data buffer, tensor descriptor, op attr, op handle, dataset, model
description, model id) get, most of the time, one of the right kind that earlier calls of
the same example made and that is live; else a destroyed one, one of another kind, or a
made-up one. A quarter of the calls come from the calls that make compute handles (data
buffers, descriptors, op attrs, datasets, model descriptions, models, events), a sixth from
the compute calls that can get a live handle of each kind they take, so operators and
models run. A sixth work on virtual memory, half of them the call that takes the page table a
step further (reserve, back with a handle of whole pages, map), and half the virtual-memory
calls get arguments they take now (a matching reservation page, handle and size for a map),
so that mapping, access through mappings, unmapping and releasing run. One call in thirteen
shares memory between processes (IPC keys, shareable handles); half of those get what they
take now, an import a key or shareable handle another process of the machine exported just
before, so exports, whitelists, imports and closes run (over 2,000 examples, seed 1, every
sharing call but ipc_mem_set_attr, an Atlas A3 call, succeeded in some). After each call it
checks (the cache operations of 11-06 and the device-variable calls of 11-11 are drawn with
the pool calls, with plausible types, barrier ids and symbols, one of a variable declared
here; 11-06's barrier calls are refused on every built-in product; the custom allocator
calls of 11-08 too, half of them the next step of a registration, and one op type takes
workspace, so that operators ask the allocators registered on their streams, which through
pyacl give NULL):

* no exception escapes the face (``acl.util`` may raise the core's exceptions, as documented);
* every code returned is one the error code reference's table lists;
* a failed call (a code, or for a call that returns no code, a new
  ``acl.get_recent_err_msg``) changes nothing: memory figures, usage info, the free runs (so
  the next address), the blocks, the sanitizer's quarantine, host memory, queued work, and
  the compute plane: its live handles and what the face reads back from them (a buffer's
  address and size, a descriptor's type, dims, format and name, an attr's values, a
  dataset's buffers, a model description's model), the live events and their status;
* for each memory, free + the footprints of the live blocks == total.

``--hypothesis-show-statistics`` shows, per example, what share of the compute calls
returned 0 and whether an operator or a model ran.

The budget is the Hypothesis profile's (``HYPOTHESIS_PROFILE=thorough`` searches 2,000
examples, the default profile 50).
"""

import atexit
import contextlib
import inspect
import io
import json
import os
import re
import shutil
import tempfile

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ascend_memsim import (
    AclError,
    Runtime,
    acl,
    device_variable,
    register_model,
    unregister_model,
)
from ascend_memsim.compute.kernels import BUILTIN_KERNELS
from ascend_memsim.compute.models import Dataset, Model, ModelDesc
from ascend_memsim.compute.ops import OpAttr, OpHandle, register_op, unregister_op
from ascend_memsim.compute.plane import compute_plane
from ascend_memsim.compute.tensors import HANDLE_BASE, DataBuffer, TensorDesc
from ascend_memsim.data.host import REGISTERED_BASE
from ascend_memsim.data.raw import mapping
from ascend_memsim.media.descs import (
    BatchPicDesc,
    BorderConfig,
    ChannelDesc,
    JpegeConfig,
    PicDesc,
    ResizeConfig,
    RoiConfig,
    StreamDesc,
)
from ascend_memsim.media.plane import media_plane
from ascend_memsim.memory.args import int_or_none
from ascend_memsim.memory.constants import ErrorCode
from ascend_memsim.memory.physical import PhysicalHandle, granule
from ascend_memsim.memory.rules import UVM_BASE, device_base
from ascend_memsim.memory.vmm import VA_BASE
from ascend_memsim.runtime.custom_alloc import DESC_BASE, AllocatorDesc
from ascend_memsim.runtime.events import EVENT_BASE, Event
from ascend_memsim.runtime.pools import POOL_BASE, Pool

MiB = 1 << 20
ERRORS_PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                           "reference", "errors.md")


def _documented_codes() -> set[int]:
    """The codes of the error code reference (docs/reference/errors.md)."""
    with open(ERRORS_PAGE, encoding="utf-8") as f:
        section = f.read()
    return {int(code) for code in re.findall(r"\b[1-5]\d{5}\b", section)}


CODES = _documented_codes() | {0}

# Every function of the face, with the namespace it hangs from: acl itself (init, finalize,
# data buffers, tensor descriptors, ...), acl.rt, acl.op, acl.mdl, acl.util, acl.media.
FACE = [("acl", acl.init), ("acl", acl.finalize),
        *[("acl", getattr(acl, name)) for name in acl.__all__
          if name not in ("init", "finalize") and not name.isupper()
          and inspect.isfunction(getattr(acl, name, None))],
        *[(space, getattr(getattr(acl, space), name))
          for space in ("rt", "op", "mdl", "util", "media")
          for name in getattr(acl, space).__all__ if not name.isupper()]]
MEMORY_FACE = [(space, fn) for space, fn in FACE if space in ("rt", "media", "util")]
ALLOCATING = [(space, fn) for space, fn in MEMORY_FACE if fn.__name__ in (
    "malloc", "malloc_align32", "malloc_cached", "malloc_with_cfg", "malloc_for_task_scheduler",
    "free", "free_with_dev_sync", "dvpp_malloc", "dvpp_free", "malloc_host", "free_host",
    "memcpy", "memset", "memcpy_async", "memset_async", "numpy_to_ptr", "bytes_to_ptr",
    "reserve_mem_address", "release_mem_address", "malloc_physical", "free_physical",
    "map_mem", "unmap_mem")]
#: Memory shared between processes: IPC keys and shareable handles (acl/_ipc.py).
SHARING = [(space, fn) for space, fn in MEMORY_FACE
           if fn.__module__ == acl.rt.ipc_mem_close.__module__]
#: Stream-ordered memory pools (11-10), with the streams they need and the synchronisation
#: that runs their frees and releases their memory.
POOLING = [(space, fn) for space, fn in MEMORY_FACE if fn.__name__.startswith("mem_pool_")
           or fn.__name__.startswith("cmo_") or "symbol" in fn.__name__
           or fn.__name__ in ("create_stream", "synchronize_stream", "synchronize_device",
                              "memset_async", "memcpy", "value_write", "value_wait")
           # custom allocators (11-08) are registered on streams too
           or fn.__name__.startswith("allocator_")]
#: A device variable (11-11), so that symbols are sometimes ones a kernel registered.
VARIABLE = device_variable("fuzz", 64, b"fuzz")
#: Managed memory and aclrtMemP2PMap (11-05), with the streams, copies, frees and peer
#: access around them.
MANAGED = [(space, fn) for space, fn in MEMORY_FACE
           if fn.__module__ == acl.rt.mem_alloc_managed.__module__
           or fn.__name__ in ("create_stream", "synchronize_stream", "memcpy", "free", "malloc",
                              "device_enable_peer_access", "pointer_get_attributes")]
#: Virtual memory: reserve, back with physical memory, map, use, unmap, free, release.
VIRTUAL = [(space, fn) for space, fn in MEMORY_FACE if fn.__name__ in (
    "reserve_mem_address", "release_mem_address", "malloc_physical", "free_physical",
    "map_mem", "mem_map_no_access", "unmap_mem", "mem_set_access", "memcpy", "memset")]
# The compute face: data buffers and tensor descriptors, acl.op, acl.mdl and acl.rt's events.
COMPUTE_FACE = [(space, fn) for space, fn in FACE if space in ("op", "mdl")
                or (space == "acl" and ("data_buffer" in fn.__name__ or "tensor" in fn.__name__))
                or (space == "rt" and "event" in fn.__name__)]
# The compute calls that make handles (or fill them: a dataset's buffers, a description's
# model, an event's record), so that sequences reach the calls that use them.
MAKING = [(space, fn) for space, fn in COMPUTE_FACE if fn.__name__ in (
    "create_data_buffer", "create_tensor_desc", "create_attr", "create_handle", "create_desc",
    "get_desc", "create_dataset", "add_dataset_buffer", "load_from_file", "create_event",
    "record_event")]
# acl.media's descriptions, configs, channels and VPC calls (dvpp_malloc/free are memory).
MEDIA_FACE = [(space, fn) for space, fn in FACE if space == "media"
              and fn.__name__ not in ("dvpp_malloc", "dvpp_free")]
MEDIA_MAKING = [(space, fn) for space, fn in MEDIA_FACE
                if fn.__name__.startswith("dvpp_create_") and fn.__name__ != "dvpp_create_channel"]
MEDIA_VPC = [(space, fn) for space, fn in MEDIA_FACE if fn.__name__.startswith("dvpp_vpc_")]
# The calls that may run queued work: when work is queued, their error may come from that
# work, which ran (a synchronising call cannot undo it).
RUNS_QUEUED_WORK = {"synchronize_stream", "synchronize_device", "destroy_stream",
                    "destroy_context", "free_with_dev_sync", "synchronize_event",
                    "synchronize_event_with_timeout", "query_event", "query_event_status",
                    "query_event_wait_status", "execute", "execute_v2", "execute_with_handle",
                    "cast", "process_report", "unload", "destroy_event", "reset_device",
                    "free_host_with_dev_sync"}

_BIG = [0, 1, -1, 2, 31, 32, 33, 64, 100, 4096, MiB, 2 * MiB, 2 * MiB + 1, 2**31 - 1, 2**31,
        -(2**31), -(2**31) - 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 33, 2**64 - 1,
        2**64, 2**70, -(2**70)]
ints = st.one_of(st.integers(-3, 20), st.sampled_from(_BIG), st.integers(0, 8 * MiB),
                 st.integers(-(2**70), 2**70))
scalars = st.one_of(
    ints, st.booleans(), st.none(),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1.0, 0.0, 1e400, -0.0]),
    st.text(max_size=6), st.sampled_from(["0", "100", "stdout", "A2", "\u00b2"]),
    st.binary(min_size=0, max_size=16).map(lambda b: bytes(bytearray(b))),
    st.builds(bytearray, st.binary(max_size=64)),
)
numpy_values = st.one_of(
    st.builds(np.int64, st.integers(-(2**63), 2**63 - 1)),
    st.builds(np.uint64, st.integers(0, 2**64 - 1)),
    st.builds(np.int32, st.integers(-(2**31), 2**31 - 1)),
    st.builds(np.float32, st.floats(width=32)), st.builds(np.bool_, st.booleans()),
    st.builds(lambda n: np.arange(n, dtype=np.int8), st.integers(0, 64)),
    st.builds(lambda n: np.zeros((n, 3), dtype=np.float32)[:, 1], st.integers(0, 8)),
    st.builds(lambda n: np.array([None] * n, dtype=object), st.integers(0, 4)),
    st.sampled_from([np.zeros((), dtype=np.int64), np.ones((2, 2), dtype=np.float64)]),
)
containers = st.one_of(
    st.lists(st.one_of(ints, st.none(), st.text(max_size=2)), max_size=4),
    st.lists(st.one_of(ints, st.none()), max_size=3).map(tuple),
    st.dictionaries(ints, ints, max_size=3),
    st.lists(st.tuples(st.sampled_from([0, 1, 2, 3, 9]), ints), max_size=3),
)


class Hostile:
    """An argument that misbehaves inside the face: its ``__index__`` raises ``error`` (not a
    TypeError) or returns ``index``, and its ``__repr__`` raises when ``repr_raises``. The
    repr raises only while a face call runs (:data:`armed`), so that Hypothesis and the
    assertions below can still show the example."""

    armed = False

    def __init__(self, error: type[Exception] | None, index: int = 7,
                 repr_raises: bool = True) -> None:
        self.error, self.index, self.repr_raises = error, index, repr_raises

    def __index__(self) -> int:
        if self.error is not None:
            raise self.error("hostile __index__")
        return self.index

    def __repr__(self) -> str:
        if Hostile.armed and self.repr_raises:
            raise RuntimeError("hostile __repr__")
        return f"Hostile({getattr(self.error, '__name__', None)}, {self.index}, {self.repr_raises})"


class HostileInt(int):
    """An int whose ``__repr__`` raises while a face call runs."""

    def __repr__(self) -> str:
        if Hostile.armed:
            raise RuntimeError("hostile __repr__")
        return f"HostileInt({int(self)})"


hostile = st.one_of(
    st.builds(Hostile, st.sampled_from([ValueError, RuntimeError, OverflowError,
                                        ZeroDivisionError, KeyError, None]),
              st.sampled_from([0, 7, 64, -1, 2**64]), st.booleans()),
    st.builds(HostileInt, st.sampled_from([0, 1, 7, 100, 2**31, -1])),
    st.builds(lambda h: [h], st.builds(Hostile, st.just(ValueError))),
)
values = st.one_of(scalars, numpy_values, containers, hostile)
# What a JSON config can hold (json.dumps writes NaN and Infinity, which json.loads reads).
json_values = st.one_of(ints, st.booleans(), st.none(), st.floats(), st.text(max_size=6),
                        st.sampled_from(["0", "100", "stdout", "A2", "\u00b2", 1e400]),
                        st.lists(st.one_of(ints, st.text(max_size=2)), max_size=3))

# acl.init configs: mostly well formed, with arbitrary values in their keys.
sanitizer_options = st.fixed_dictionaries({}, optional={
    "mode": st.sampled_from(["off", "report", "strict", "loud", 1]),
    "quarantine_bytes": st.one_of(st.sampled_from([0, 4 * MiB, 64 * MiB]), json_values),
    "print_limit": st.one_of(st.integers(0, 5), json_values),
    "history": st.one_of(st.integers(0, 50), json_values),
    "site_depth": st.one_of(st.integers(1, 8), json_values),
    "initcheck": st.one_of(st.booleans(), json_values),
    "leaks": st.booleans(), "record_sites": st.booleans(),
}).map(lambda d: {**d, "output": None})
fault_specs = st.one_of(
    st.fixed_dictionaries({"nth": st.integers(1, 6)},
                          optional={"api": st.sampled_from(["malloc", "malloc_cached", "x"]),
                                    "times": st.one_of(st.integers(1, 3), st.none())}),
    st.fixed_dictionaries({"probability": st.floats(0, 1), "seed": st.integers(0, 9)}),
    st.fixed_dictionaries({"huge_pages_exhausted": st.just(True)}),
    st.dictionaries(st.sampled_from(["nth", "size", "policy", "error", "device", "bogus"]),
                    json_values, max_size=2),
)
memsim_sections = st.fixed_dictionaries({}, optional={
    "product": st.one_of(st.sampled_from(["A2", "A3", "950PR", "950DT", "310P"]), json_values),
    "hbm_bytes": st.one_of(st.sampled_from([64 * MiB, 128 * MiB, 3 * 2**30]), json_values),
    "device_count": st.one_of(st.integers(1, 3), json_values),
    "sanitizer": st.one_of(sanitizer_options, st.sampled_from(["off", "report", "strict"])),
    "faults": st.lists(fault_specs, max_size=2),
})
configs = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={
        "memsim": memsim_sections,
        "defaultDevice": st.fixed_dictionaries({"default_device": st.one_of(
            st.sampled_from(["0", "1", "01", "x", ""]), json_values)}),
    }),
    st.sampled_from(["not json", "[1]", '{"memsim": []}']),
)
# A config that always starts (so every example reaches the memory calls).
FALLBACK = {"memsim": {"product": "A2", "hbm_bytes": 64 * MiB, "device_count": 2,
                       "sanitizer": {"output": None}}}

_DIR = tempfile.mkdtemp(prefix="memsim-fuzz-")
# taken away when the test process ends (each xdist worker imports this module)
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)
# A model with a stand-in (registered while the test runs; no file), so that
# acl.mdl.load_from_file can succeed and models run.
MODEL_PATH = "/nonexistent/fuzz-model.om"
MODEL = {"inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32"}],
         "outputs": [{"name": "y", "shape": [2, 3], "dtype": "float32"}],
         "weight_bytes": 4096, "work_bytes": 0}
# A model with dynamic batch gears (its inputs: x and ascend_mbatch_shape_data), so that the
# gear calls can succeed and dynamic models run.
DYNAMIC_PATH = "/nonexistent/fuzz-dynamic.om"
DYNAMIC = {"inputs": [{"name": "x", "shape": [-1, 3], "dtype": "float32"}],
           "outputs": [{"name": "y", "shape": [-1, 3], "dtype": "float32"}],
           "dynamic_batch_size": [1, 2]}


def _write_config(config) -> str | None:
    if config is None:
        return None
    path = os.path.join(_DIR, f"acl-{os.getpid()}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(config if isinstance(config, str) else json.dumps(config))
    return path


def _runtime():
    return Runtime.active[-1] if Runtime.active else None


def _snapshot(rt, seen):
    """Everything a failed call must leave as it was (``seen``: this example's handles)."""
    if rt is None:
        return None
    devices = []
    for device in rt.devices():
        devices.append((
            device.device_id,
            [device.mem_info(attr) for attr in range(18)],
            device.usage(),
            [tuple(a.free_runs()) for a in device.allocators.values()],
            [(b.ptr, b.size, b.footprint, b.mem_type, b.module) for b in device.blocks()],
            [b.ptr for b in device.held()],
            dict(device.physical),
        ))
    host = [(b.ptr, b.size) for b in rt.host.blocks()]
    compute = sorted((h.handle, _readable(h)) for h in _compute_handles(rt))
    media = sorted((h.handle, repr(sorted((k, v) for k, v in vars(h).items() if k != "site")))
                   for h in _media_handles(rt))
    events = [(h, rt.events.recorded_status(h)) for h in seen.live_events(rt)]
    peer = rt.extension("peer")
    pinned = rt.extension("pinned")
    chapter = (sorted(peer.enabled) if peer else [],
               pinned.snapshot() if pinned else [],
               [(a.ptr, a.size, a.footprint, a.device_id, a.phys, sorted(a.pages.items()))
                for a in rt.managed.allocations()], sorted(rt.managed.p2p_maps))
    pools = [(p.handle, p.segments.reuse, p.segments.threshold, p.segments.used,
              p.segments.reserved, p.segments.used_high, p.segments.reserved_high,
              [(g.ptr, g.size, g.busy, g.done) for g in p.segments.segments.values()])
             for p in rt.pools.pools()]
    space = rt.vmm.space  # made at the first virtual-memory call: empty is as good as none
    vmm = None if space is None or not (space.reservations or space.handles) else (
        [(r.ptr, r.size, [(m.ptr, m.handle.handle, dict(m.access)) for m in r.maps.values()])
         for r in space.reservations.values()],
        sorted((h.handle, h.refs, tuple(sorted(h.maps))) for h in space.handles.values()))
    machine = rt.machine
    with machine.lock:
        sharing = (sorted((k, r.runtime.pid, sorted(r.pids), r.closed, r.freed, r.link,
                           sorted((p, len(m)) for p, m in r.imports.items()))
                          for k, r in machine.ipc_keys.items()),
                   sorted((repr(v), r.runtime.pid, sorted(r.pids), sorted(r.importers),
                           len(r.holders)) for v, r in machine.shareable.items()),
                   sorted(machine.processes))
    allocators = rt.custom_allocators
    custom = (sorted((h, id(d.obj), id(d.alloc), id(d.free), id(d.alloc_advise), id(d.get_addr))
                     for h, d in allocators._descs.items()),
              sorted((s, r.desc, id(r.alloc)) for s, r in allocators.registered.items()),
              sorted((k, id(f)) for k, f in allocators.pyacl.funcs.items()))
    return (rt.profile, devices, host, rt.streams.pending, rt.acl_initialized, compute, events,
            chapter, vmm, media, sharing, pools, custom)


def _media_handles(rt) -> list:
    """The media plane's live handles (none if the runtime never made the plane)."""
    plane = None if rt is None else media_plane(rt, make=False)
    return [] if plane is None else plane.handles.live()


def _compute_handles(rt) -> list:
    """The compute handles live in ``rt`` (as the ``memsim`` fixture finds them: a runtime
    that never made any has no compute plane, and none is made to say so)."""
    plane = compute_plane(rt, make=False)
    return [] if plane is None else plane.handles.live()


def _readable(handle) -> tuple:
    """What the face reads back from a compute handle (an attr's values and a model's blocks
    reach the kernels and the memory figures; an op handle is fixed when made)."""
    if isinstance(handle, DataBuffer):
        return ("data buffer", handle.addr, handle.nbytes)
    if isinstance(handle, TensorDesc):
        return ("tensor desc", handle.dtype, handle.dims, handle.format, handle.name,
                handle.const)
    if isinstance(handle, OpAttr):  # repr: a float attribute may be NaN
        return ("op attr", repr(sorted(handle.values.items())))
    if isinstance(handle, Dataset):
        return ("dataset", tuple(handle.buffers), handle.gear,
                tuple(sorted((i, d.handle) for i, d in handle.descs.items())))
    if isinstance(handle, ModelDesc):
        return ("model description", handle.spec, handle.model)
    if isinstance(handle, Model):
        return ("model", handle.model_id, handle.blocks, handle.gear)
    return (handle.kind,)


def _check_accounting(rt):
    if rt is None:
        return
    for device in rt.devices():
        device.check_invariants()
        # free memory is the device's: every process's view of it holds some (budget.py)
        live = {}
        main = device.profile.main_memory
        for view in device.budget.views:
            for block in view.blocks():
                live[block.memory] = live.get(block.memory, 0) + block.footprint
            live[main] = live.get(main, 0) + sum(view.physical.values())
        for memory, allocator in device.allocators.items():
            attr = acl.ACL_HBM_MEM if memory.value == "HBM" else acl.ACL_DDR_MEM
            free, total = device.mem_info(attr)
            if memory is device.profile.main_memory or attr == acl.ACL_DDR_MEM:
                assert free + live.get(memory, 0) == total == allocator.capacity


def _pointers(rt):
    """Addresses worth trying now: at, inside, just past and before live blocks (device and
    host), freed and quarantined ones, other devices' windows, host windows."""
    found = [device_base(d) + off for d in (0, 1, 2, 5) for off in (0, 64, 2 * MiB)]
    found += [REGISTERED_BASE, REGISTERED_BASE + 64, 0x1234]
    if rt is not None:
        for device in rt.devices():
            for block in [*device.blocks(), *device.held()][:20]:
                found += [block.ptr, block.ptr + 32, block.ptr + block.size,
                          block.ptr + block.footprint, block.ptr - 64]
        # aclrtMallocHost blocks are real memory: only addresses inside them (past the end
        # lies the process's own memory, which the face accepts as a raw host address)
        for block in rt.host.blocks()[:10]:
            found += [block.ptr, block.ptr + 8]
        for reg in rt.host.registrations()[:10]:
            found += [reg.ptr, reg.ptr + 1]
        space = rt.vmm.space
        for reservation in [] if space is None else list(space.reservations.values())[:5]:
            found += [reservation.ptr, reservation.ptr + 2 * MiB, reservation.end]
            found += [m.ptr + off for m in list(reservation.maps.values())[:5]
                      for off in (0, 64, m.size)]
        found += [VA_BASE + (1 << 30)]
        for alloc in rt.managed.allocations()[:5]:
            found += [alloc.ptr, alloc.ptr + 64, alloc.ptr + alloc.size, alloc.end]
        found += [UVM_BASE, UVM_BASE + 2 * MiB]
    return found


def _handles(rt):
    """Stream and context handles: live, destroyed and made up."""
    found = [0, None, 1 << 32, (1 << 33) + 64]
    if rt is not None:
        streams = rt.streams
        found += list(streams._streams)[:8] + list(streams._contexts)[:8]
    return found


#: Parameters (by name, in the face's signatures) that take one handle, and its kind (see
#: _handle_kind for ``attr``, and for acl.rt's virtual memory, whose ``handle`` is a physical
#: memory handle).
HANDLE_PARAMS = {
    "data_buffer": DataBuffer, "src_buffer": DataBuffer, "dst_buffer": DataBuffer,
    "desc": TensorDesc, "src_desc": TensorDesc, "dst_desc": TensorDesc,
    "attr": OpAttr, "op_attr": OpAttr, "handle": OpHandle, "model_desc": ModelDesc,
    "dataset": Dataset, "input": Dataset, "output": Dataset,
    "event": Event, "start": Event, "end": Event, "mem_pool": Pool,
    "allocator_desc": AllocatorDesc,
}
#: acl.media's parameters that take one handle, and their kind (``input_desc`` is a picture
#: there, a list of tensor descriptors in acl.op).
MEDIA_PARAMS = {
    "channel_desc": ChannelDesc, "pic_desc": PicDesc, "input_desc": PicDesc,
    "output_desc": PicDesc, "batch_pic_desc": BatchPicDesc, "src_batch_pic_descs": BatchPicDesc,
    "dst_batch_pic_descs": BatchPicDesc, "stream_desc": StreamDesc, "roi_config": RoiConfig,
    "config": RoiConfig, "crop_area": RoiConfig, "paste_area": RoiConfig,
    "resize_config": ResizeConfig, "jpege_config": JpegeConfig, "border_config": BorderConfig,
}
#: acl.media's parameters that take a list of handles.
MEDIA_LISTS = {"crop_areas": RoiConfig, "paste_areas": RoiConfig, "border_cfgs": BorderConfig}
_MEDIA = acl.media.__name__
#: Parameters that take a list of handles (acl.op's descriptors and buffers).
HANDLE_LISTS = {"input_desc": TensorDesc, "output_desc": TensorDesc,
                "inputs": DataBuffer, "outputs": DataBuffer}
#: Handles no call made: NULL, past the last handle, between two, and other numberings.
MADE_UP = [0, None, -1, HANDLE_BASE + 64 * 4096, HANDLE_BASE + 32, EVENT_BASE + 64 * 4096,
           EVENT_BASE + 1, 1 << 32, 2**64 - 1, POOL_BASE + 64 * 4096, DESC_BASE + 64 * 4096]
_EVENT_MAKERS = {acl.rt.create_event, acl.rt.create_event_with_flag,
                 acl.rt.create_event_ex_with_flag}


class _Seen:
    """The handles the face handed out in one example, with their kinds: the compute plane's
    (read from its handle table after each call) and the events create_event returned. The
    live ones are asked of the runtime; the others were destroyed (or belong to a runtime
    that was finalized)."""

    def __init__(self) -> None:
        self.kinds: dict[int, type] = {}

    def note(self, rt, fn, result) -> None:
        """Remember the handles live after ``fn`` returned ``result``."""
        if fn is acl.rt.malloc_physical and isinstance(result, tuple) and result[-1] == 0:
            self.kinds[result[0]] = PhysicalHandle
        if fn in _EVENT_MAKERS and isinstance(result, tuple) and result[-1] == 0:
            self.kinds[result[0]] = Event
        if fn is acl.rt.mem_pool_create and isinstance(result, tuple) and result[-1] == 0:
            self.kinds[result[0]] = Pool
        if fn is acl.rt.allocator_create_desc and result:
            self.kinds[result] = AllocatorDesc
        if rt is not None:
            for handle in [*_compute_handles(rt), *_media_handles(rt)]:
                self.kinds[handle.handle] = type(handle)

    def live_events(self, rt) -> list[int]:
        live = []
        for handle, kind in self.kinds.items():
            if kind is Event:
                with contextlib.suppress(AclError):
                    rt.events.get(handle)
                    live.append(handle)
        return live

    def live(self, rt) -> dict[type, list[int]]:
        """The live handles of ``rt``, by kind."""
        found: dict[type, list[int]] = {Event: self.live_events(rt)} if rt is not None else {}
        for handle in [*_compute_handles(rt), *_media_handles(rt)] if rt is not None else ():
            found.setdefault(type(handle), []).append(handle.handle)
        space = None if rt is None else rt.vmm.space
        if space is not None:
            found[PhysicalHandle] = [h.handle for h in space.handles.values() if h.refs]
        if rt is not None:
            found[Pool] = [p.handle for p in rt.pools.pools()]
            found[AllocatorDesc] = list(rt.custom_allocators._descs)
        return found


def _handle_kind(fn, name: str) -> type | None:
    """The kind of handle parameter ``name`` of ``fn`` takes (one or a list), or None. In
    acl.rt, ``attr`` is get_mem_info's memory attribute, not an op attr."""
    if fn.__module__ == _MEDIA:
        return MEDIA_PARAMS.get(name) or MEDIA_LISTS.get(name)
    if name == "attr" and fn.__module__ != acl.op.__name__:
        return None
    if fn.__module__ in (_VMM_FACE, _SHARING_FACE):
        # acl.rt's virtual memory: ``handle`` is a physical memory handle, ``desc`` a list of
        # access descriptors
        return PhysicalHandle if name == "handle" else None
    return HANDLE_PARAMS.get(name) or HANDLE_LISTS.get(name)


_VMM_FACE = acl.rt.map_mem.__module__
_SHARING_FACE = acl.rt.ipc_mem_close.__module__


#: The kinds of handle each compute call takes (``model_id``: a loaded model).
WANTS = {fn: {Model if name == "model_id" else _handle_kind(fn, name)
              for name in inspect.signature(fn).parameters} - {None}
         for _, fn in COMPUTE_FACE + MEDIA_FACE}


def _ready(rt, seen: _Seen, face: list = COMPUTE_FACE) -> list:
    """The compute (or media) calls that take handles and can get a live one of each kind
    now."""
    if rt is None:
        return []
    live = seen.live(rt)
    return [(space, fn) for space, fn in face
            if WANTS[fn] and all(live.get(kind) for kind in WANTS[fn])]


def _next_virtual(rt) -> list:
    """The virtual-memory calls that take the page table a step further: a reservation when
    there is none, physical memory when no handle can map, a map when one can, and an unmap
    or a copy when something is mapped."""
    space = None if rt is None else rt.vmm.space
    names = ["map_mem", "mem_map_no_access"] if _triples(rt) else ["free_physical"]
    if space is not None and any(r.maps for r in space.reservations.values()):
        names += ["unmap_mem", "memcpy", "memset"]
    if space is None or not space.reservations:
        names = ["reserve_mem_address"]
    elif not any(h.refs and h.size % granule(h.page) == 0 for h in space.handles.values()):
        names = ["malloc_physical"]
    return [(where, fn) for where, fn in VIRTUAL if fn.__name__ in names]


def _pool(data, rt, seen: _Seen) -> list:
    """Where the next call comes from: one time in twenty init or finalize (which end or
    restart the runtime), else, of twelve calls, two allocate, free or move bytes, two work
    on virtual memory (half of them the next step, :func:`_next_virtual`, so that
    reservations and handles meet in one example and map), one
    comes from the memory face (acl.rt, acl.media, acl.util), three make compute handles, two
    use the live ones (:func:`_ready`; else they make some), one comes from the compute face
    and one from the whole face."""
    if data.draw(st.integers(0, 19), label="init or finalize") == 0:
        return FACE[:2]
    if data.draw(st.integers(0, 5), label="media") == 0:
        # one call in six is acl.media's: half make descriptions or call the VPC (then half
        # the time with what it takes, see _well_formed_vpc), half use live descriptions
        ready = _ready(rt, seen, MEDIA_FACE)
        return ready if ready and data.draw(st.booleans(), label="media: use") else (
            MEDIA_MAKING + MEDIA_VPC)
    which = data.draw(st.integers(0, 13), label="pool")
    if which == 1 and data.draw(st.booleans(), label="the next allocator step"):
        return _next_allocator(rt)
    if which in (8, 9):
        return _ready(rt, seen) or MAKING
    if which in (2, 3) and data.draw(st.booleans(), label="the next virtual-memory step"):
        steps = _next_virtual(rt)
        # one of them, drawn here: sampled_from over a short list that changes from step
        # to step kept picking the same position
        return [steps[data.draw(st.integers(0, len(steps) - 1), label="step")]]
    return ([ALLOCATING, POOLING] + [VIRTUAL] * 2 + [MEMORY_FACE] + [MAKING] * 3 + [None] * 2
            + [COMPUTE_FACE, FACE[2:], SHARING, MANAGED])[which]


#: The custom allocator calls by name (acl/_allocator.py).
ALLOCATOR_CALLS = {fn.__name__: (space, fn) for space, fn in MEMORY_FACE
                   if fn.__name__.startswith("allocator_")}


def _next_allocator(rt) -> list:
    """The custom allocator call that takes a registration a step further: a descriptor
    when there is none, its object and functions, a stream to register on, the registration,
    and once something is registered an unregister or another descriptor."""
    ca = None if rt is None else rt.custom_allocators
    descs = [] if ca is None else list(ca._descs.values())
    names = ["allocator_create_desc"]
    if any(d.obj is None for d in descs):
        names = ["allocator_set_obj_to_desc"]
    elif any(d.alloc is None or d.free is None or d.get_addr is None for d in descs):
        names = ["allocator_set_alloc_func_to_desc", "allocator_set_free_func_to_desc",
                 "allocator_set_get_addr_from_block_func_to_desc",
                 "allocator_set_alloc_advise_func_to_desc"]
    elif descs and not rt.streams._streams:
        return [(space, fn) for space, fn in POOLING if fn.__name__ == "create_stream"]
    elif descs and not ca.registered:
        names = ["allocator_register"]
    elif descs:
        # registered: mostly an operator that takes workspace on that stream (see _call)
        names = ["allocator_unregister", "allocator_get_by_stream", "allocator_create_desc"]
        return [("op", acl.op.execute_v2)] * 3 + [ALLOCATOR_CALLS[name] for name in names]
    return [ALLOCATOR_CALLS[name] for name in names]


def _workspace_op_args(data, rt) -> list | None:
    """execute_v2's arguments for the workspace op on a stream with an allocator registered:
    a float32 [2, 3] descriptor and three buffers over fresh blocks (inputs written), made
    through the face; None when there is no such stream or memory runs out."""
    registered = sorted(rt.custom_allocators.registered) if rt is not None else []
    live = [h for h in registered if h in rt.streams._streams]
    if not live:
        return None
    desc = acl.create_tensor_desc(acl.ACL_FLOAT, [2, 3], acl.ACL_FORMAT_ND)
    buffers = []
    for _ in range(3):
        ptr, code = acl.rt.malloc(24, 0)
        if code:
            return None
        acl.rt.memset(ptr, 24, 0, 24)
        buffers.append(acl.create_data_buffer(ptr, 24))
    stream = data.draw(st.sampled_from(live), label="a registered stream")
    return [WORKSPACE_OP, [desc, desc], buffers[:2], [desc], buffers[2:], 0, stream]


_ALLOCATOR_FACE = acl.rt.allocator_register.__module__
_SETS = {"allocator_set_obj_to_desc": "obj", "allocator_set_alloc_func_to_desc": "alloc",
         "allocator_set_free_func_to_desc": "free",
         "allocator_set_alloc_advise_func_to_desc": "alloc_advise",
         "allocator_set_get_addr_from_block_func_to_desc": "get_addr"}


def _allocator_args(data, rt, fn) -> list | None:
    """Arguments the custom allocator call ``fn`` takes now, or None (see :func:`_call`)."""
    ca = None if rt is None else rt.custom_allocators
    if ca is None:
        return None
    name = fn.__name__
    descs = list(ca._descs.values())
    if name in _SETS:
        field = _SETS[name]
        wanting = [d.handle for d in descs if getattr(d, field) is None] or [
            d.handle for d in descs]
        if not wanting:
            return None
        desc = data.draw(st.sampled_from(wanting), label="a descriptor")
        value = PLAUSIBLE["allocator" if field == "obj" else "func"]
        return [desc, data.draw(value, label=field)]
    if name == "allocator_register":
        # a complete descriptor and a live stream, made through the face when there are none
        complete = [d.handle for d in descs
                    if None not in (d.obj, d.alloc, d.free, d.get_addr)]
        if not complete:
            desc = acl.rt.allocator_create_desc()
            acl.rt.allocator_set_obj_to_desc(desc, 1)
            for setter in ("alloc", "free", "get_addr_from_block"):
                func = data.draw(PLAUSIBLE["func"], label=f"{setter} function")
                getattr(acl.rt, f"allocator_set_{setter}_func_to_desc")(desc, func)
            complete = [desc]
        streams = [h for h, st_ in rt.streams._streams.items() if not st_.destroyed]
        if not streams:
            stream, code = acl.rt.create_stream()
            streams = [stream] if code == 0 else [0]
        return [data.draw(st.sampled_from(streams), label="stream"),
                data.draw(st.sampled_from(complete), label="a complete descriptor")]
    if name in ("allocator_unregister", "allocator_get_by_stream") and ca.registered:
        return [data.draw(st.sampled_from(sorted(ca.registered)), label="a registered stream")]
    return None


def _draw_handle(data, rt, seen: _Seen, kind: type, name: str):
    """A handle for parameter ``name``: seven times in ten a live one of ``kind``, else a
    destroyed one, a live one of another kind (or a stream, a context), or a made-up one
    (each of these in turn when there is none)."""
    live = seen.live(rt)
    own = live.get(kind, [])
    gone = sorted(h for h, k in seen.kinds.items() if k is kind and h not in own)
    other = [h for k, hs in live.items() if k is not kind for h in hs] + _handles(rt)[4:]
    which = data.draw(st.sampled_from(["live"] * 7 + ["destroyed", "another kind", "made up"]),
                      label=f"{name}: which handle")
    pools = {"live": own, "destroyed": gone, "another kind": other, "made up": MADE_UP}
    order = ["live", "destroyed", "another kind", "made up"]
    for choice in order[order.index(which):]:
        if pools[choice]:
            return data.draw(st.sampled_from(pools[choice]), label=f"{name}: {choice}")
    raise AssertionError("MADE_UP is never empty")


#: An operator that takes workspace (an Add whose kernel declares 256 bytes), so that operators
#: ask the allocators registered on their streams.
WORKSPACE_OP = "FuzzWorkspaceAdd"

_SIZES = st.one_of(st.integers(1, 4096), st.sampled_from([MiB, MiB + 1, 2 * MiB, 3 * MiB]),
                   st.integers(1, 8 * MiB))
#: For a parameter name, values the call can take, so that sequences reach deep states.
PLAUSIBLE = {
    "size": _SIZES, "count": _SIZES, "max_count": _SIZES, "dest_max": _SIZES,
    "policy": st.one_of(st.integers(0, 8), st.sampled_from([0x100, 0x1000, 0x100002, -1])),
    "device_id": st.integers(0, 2), "attr": st.integers(0, 18), "kind": st.integers(0, 6),
    "value": st.integers(-1, 256), "input_num": st.integers(0, 5),
    "mem_type": st.sampled_from([2, 8, 16, 10, 0, 1]), "reserve": st.sampled_from([0, 1]),
    "level": st.integers(0, 4), "message": st.text(max_size=8),
    # pyacl's aclrtMallocConfig dict ({} for none), and the core's form, which pyacl refuses
    "cfg": st.one_of(
        st.just({}), st.none(),
        st.lists(st.tuples(st.sampled_from([0, 1, 2, 3, 9]),
                           st.sampled_from(["moduleId", "deviceId", "rsv", "x"]),
                           st.integers(0, 70000)), max_size=2).map(
            lambda attrs: {"numAttrs": len(attrs), "attrs": [
                {"attr": t, "value": {k: [v % 256] if k == "rsv" else v}}
                for t, k, v in attrs]}),
        st.dictionaries(st.sampled_from([0, 1, 2, 9]), st.integers(0, 3), max_size=2)),
    "shape": st.one_of(st.integers(0, 8), st.lists(st.integers(0, 4), max_size=3)),
    "np_type": st.one_of(st.sampled_from([0, 1, 2, 11, 12, 23, 99, "int8", "O", "1/0"])),
    "data": st.binary(min_size=0, max_size=32).map(lambda b: bytes(bytearray(b))),
    "array": numpy_values,
    "dims": st.one_of(st.lists(st.integers(0, 4), max_size=3),
                      st.lists(st.integers(-2, 5), max_size=3)),
    "data_type": st.integers(-1, 13),
    "format": st.integers(-1, 4), "index": st.integers(-1, 3), "flag": st.integers(0, 9),
    "priority": st.integers(0, 8), "model_id": st.integers(0, 3),
    "op_type": st.sampled_from(["Add", "Add", "Sub", "Cast", "Relu", "NoSuchOp", "",
                                WORKSPACE_OP]),
    # custom allocators (11-08): pyacl takes any object as a callback, and any int as the
    # allocator object
    "func": st.sampled_from([lambda *a: None, lambda *a: 4096, lambda *a: 1 / 0, 5, None]),
    "allocator": st.integers(0, 2**64 - 1),
    "name": st.one_of(st.text(max_size=4), st.sampled_from(["x", "y"])),
    "attr_name": st.one_of(st.text(max_size=4), st.sampled_from(["a", "dst_type"])),
    "truncate": st.integers(0, 1), "gear_count": st.integers(0, 5),
    # cache operations (11-06) and device variables (11-11)
    "cmo_type": st.integers(-1, 4), "barrier_id": st.integers(0, 3),
    "task_info": st.one_of(st.builds(
        lambda n, ids: {"barrierNum": n, "cmoInfo": [{"cmoType": 2, "barrierId": i}
                                                     for i in ids]},
        st.integers(0, 7), st.lists(st.integers(0, 3), max_size=7)), values),
    "symbol": st.sampled_from([VARIABLE.symbol] * 3 + [0, 12345]),
    "dst_max": _SIZES,
    # model gears (acl.mdl) and batch picture descriptions (acl.media)
    "batch_size": st.sampled_from([0, 1, 2, 3, 4, 2**64 - 1]),
    # the rest of the memory chapter (acl/_rt_memory.py)
    "width": st.integers(0, 64), "height": st.integers(0, 8), "dpitch": st.integers(0, 128),
    "spitch": st.integers(0, 128), "peer_device_id": st.integers(0, 2),
    "register_type": st.sampled_from([0, 0, 4, 8, 1]),
    "hac_type": st.integers(0, 10), "mem_size": _SIZES, "num_batches": st.integers(0, 3),
    "num_attrs": st.integers(0, 2), "dst_offset": st.integers(0, 64),
    "src_offset": st.integers(0, 64), "config": st.sampled_from([0, 0, 1]),
    # virtual memory (11-04)
    "prop": st.fixed_dictionaries(
        {"handleType": st.sampled_from([0, 0, 2]), "allocationType": st.sampled_from([0, 0, 1]),
         "memAttr": st.sampled_from([4, 4, 4, 4, 5, 10, 13, 16, 2, 8, 99]),
         "location": st.fixed_dictionaries({"id": st.sampled_from([0, 0, 0, 1, 2]),
                                            "type": st.sampled_from([1, 1, 1, 0, 2])}),
         "reserve": st.just(0)}),
    "option": st.sampled_from([0, 1, 2, 0xFFFF]), "alignment": st.sampled_from([0, 0, 4096]),
    # (a mapping's offset; a device variable's: 0-70 of its 64 bytes)
    "offset": st.sampled_from([0, 0, 0, 2 * MiB, 8, 60, 70]),
    "flags": st.sampled_from([0, 0, 0, 1, 2]),
    "location": st.fixed_dictionaries({"id": st.integers(0, 2), "type": st.integers(0, 3)}),
    # acl.media
    "width_stride": st.sampled_from([0, 16, 32, 48, 64, 96]),
    "height_stride": st.sampled_from([0, 6, 8, 16, 32]), "mode": st.integers(0, 16),
    "interpolation": st.integers(0, 6), "roi_nums": st.lists(st.integers(0, 3), max_size=3),
    "left": st.integers(0, 40), "right": st.integers(0, 64),
    "top": st.integers(0, 16), "bottom": st.integers(0, 32), "border_type": st.integers(0, 4),
    "param_type": st.integers(0, 1), "ret_code": st.integers(0, 3),
}
#: acl.op.set_attr_*'s values: scalars, strings and lists of them.
ATTR_VALUES = st.one_of(
    st.integers(-1, 256), st.booleans(), st.floats(), st.text(max_size=4),
    st.lists(st.one_of(st.integers(-1, 12), st.booleans(), st.floats(width=32)), max_size=3),
    st.lists(st.text(max_size=2), max_size=2),
    st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=2))
#: acl's data buffer calls take an address as ``data`` (acl.util.bytes_to_ptr takes bytes).
BUFFER_CALLS = {acl.create_data_buffer, acl.update_data_buffer}
#: Parameters that always get a plausible value: a wait that must stay short, and paths
#: that must name no real file.
ALWAYS = {
    "timeout": st.sampled_from([0, 1, 5]),
    "model_path": st.sampled_from([MODEL_PATH, DYNAMIC_PATH, "/nonexistent/model.om"]),
    "file_name": st.sampled_from([MODEL_PATH, DYNAMIC_PATH, "/nonexistent/x"]),
    "model_dir": st.just("/nonexistent/ops"),
}


def _not_process_memory(rt, value):
    """``value``, or 0x1234 if it is an address of the process's own memory that no
    simulated region holds: the face accepts such raw host addresses (as hardware does) and
    would write there, into the interpreter."""
    addr = int_or_none(value)
    if addr is None or addr <= 0:
        return value
    known = rt is not None and addr < 2**64 and rt.data.region_at(addr) is not None
    return value if known or mapping(addr, 1, False) is None else 0x1234


def _argument(data, rt, seen: _Seen, fn, name: str, drawn: dict):
    """A value for parameter ``name`` of ``fn`` (never the process's own memory, see
    :func:`_not_process_memory`: a data buffer's address is read and written when an
    operator or a model runs)."""
    value = _draw_argument(data, rt, seen, fn, name, drawn)
    if name in ("dsts", "srcs") and isinstance(value, list):   # the batch copies' addresses
        return [_not_process_memory(rt, v) for v in value]
    if "ptr" in name or name in ("dst", "src", "addr", "data_dev", "cmo_desc") or (
            fn in BUFFER_CALLS and name == "data"):
        return _not_process_memory(rt, value)
    return value


def _draw_argument(data, rt, seen: _Seen, fn, name: str, drawn: dict):
    """A value for parameter ``name`` of ``fn``: anything at all (one time in four), else
    something near what it wants (a handle: see :func:`_draw_handle`; a list of buffers is
    mostly as long as the list of descriptors ``drawn`` before it)."""
    if name in ALWAYS:
        return data.draw(ALWAYS[name], label=name)
    if fn is acl.mdl.set_input_dynamic_dims and name == "dims":
        # an aclmdlIODims dict (the generic "dims" draws tensor descriptor lists)
        return data.draw(st.one_of(values, st.builds(
            lambda n, dims: {"name": "", "dimCount": n, "dims": dims}, st.integers(0, 3),
            st.lists(st.integers(-1, 3), max_size=3))), label=name)
    if name in POOL_PLAUSIBLE and fn.__name__.startswith("mem_pool_") and data.draw(
            st.integers(0, 3), label=f"{name}: plausible") > 0:
        return data.draw(POOL_PLAUSIBLE[name], label=name)
    if (fn.__module__ == _MANAGED_FACE and name in MANAGED_PLAUSIBLE
            and data.draw(st.integers(0, 3), label=f"{name}: plausible") > 0):
        live = sorted(rt.managed.allocs) if rt is not None else []
        if name == "ptr" and live:
            return data.draw(st.sampled_from(live), label=name)
        if name == "ptrs" and live:
            return data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3),
                             label=name)
        return data.draw(MANAGED_PLAUSIBLE[name], label=name)
    anything = data.draw(st.integers(0, 3), label=f"{name}: anything") == 0
    if anything or name == "path":
        return data.draw(st.one_of(st.none(), st.just("/nonexistent/acl.json"), values)
                         if name == "path" else values, label=name)
    kind = _handle_kind(fn, name)
    if kind is not None and (name in HANDLE_PARAMS or kind is PhysicalHandle or (
            fn.__module__ == _MEDIA and name in MEDIA_PARAMS)):
        return _draw_handle(data, rt, seen, kind, name)
    if fn.__module__ == _MEDIA and name in MEDIA_LISTS:
        count = data.draw(st.integers(0, 3), label=f"{name}: length")
        return [_draw_handle(data, rt, seen, kind, name) for _ in range(count)]
    if name in HANDLE_LISTS:
        descs = drawn.get(name.removesuffix("s") + "_desc")
        count = data.draw(st.integers(0, 3), label=f"{name}: length")
        if isinstance(descs, list) and data.draw(st.integers(0, 3), label="as many") > 0:
            count = len(descs)
        return [_draw_handle(data, rt, seen, HANDLE_LISTS[name], name) for _ in range(count)]
    if name == "model_id" and data.draw(st.integers(0, 9), label="a loaded model") < 7:
        ids = [h.model_id for h in _compute_handles(rt) if isinstance(h, Model)] if rt else []
        if ids:
            return data.draw(st.sampled_from(ids), label=name)
    if fn in BUFFER_CALLS and rt is not None:
        # a data buffer mostly wraps a whole live block, so that operators and models run
        blocks = [b for device in rt.devices() for b in device.blocks()][:20]
        if name == "data" and blocks and data.draw(st.booleans(), label="a block"):
            return data.draw(st.sampled_from([b.ptr for b in blocks]), label=name)
        addr = drawn.get("data")
        sizes = [b.size for b in blocks if type(addr) is int and b.ptr == addr]
        if name == "size" and sizes and data.draw(st.integers(0, 3), label="its size") > 0:
            return sizes[0]
    if name == "expect_ptr" and data.draw(st.integers(0, 3), label="system placed") > 0:
        return data.draw(st.sampled_from([0, 0, 0, VA_BASE + (4 << 30)]), label=name)
    space = None if rt is None else rt.vmm.space
    if fn.__module__ == _VMM_FACE and space is not None and data.draw(
            st.integers(0, 3), label=f"{name}: from the page table") > 0:
        # map_mem and its kin mostly get a reservation's page and a live handle's size
        if name == "vir_ptr" and space.reservations:
            starts = [r.ptr + k * 2 * MiB for r in space.reservations.values() for k in range(4)]
            return data.draw(st.sampled_from(starts), label=name)
        if name == "size" and fn.__name__ != "reserve_mem_address" and space.handles:
            return data.draw(st.sampled_from([h.size for h in space.handles.values()]),
                             label=name)
    if (fn.__module__ == _VMM_FACE and name in VMM_PLAUSIBLE and fn not in MAPPING
            and data.draw(st.integers(0, 3), label=f"{name}: mappable") > 0):
        return data.draw(VMM_PLAUSIBLE[name], label=name)
    if name == "value" and fn.__module__ == acl.op.__name__:
        return data.draw(ATTR_VALUES, label=name)
    registered = sorted(rt.custom_allocators.registered) if rt is not None else []
    if name == "stream" and registered and data.draw(st.booleans(), label="registered"):
        # a stream with an allocator: operators that take workspace ask it
        return data.draw(st.sampled_from(registered), label=name)
    if name == "op_type" and registered and data.draw(st.booleans(), label="workspace"):
        return WORKSPACE_OP
    if name == "stream" and rt is not None and data.draw(st.booleans(), label="a live stream"):
        live = [h for h, s in rt.streams._streams.items() if not s.destroyed]
        if live:
            return data.draw(st.sampled_from(live), label=name)
    if name == "ptr" and fn is acl.rt.mem_pool_free_async and rt is not None:
        busy = [g.ptr for p in rt.pools.pools() for g in p.segments.busy()]
        if busy and data.draw(st.booleans(), label="a pool block"):
            return data.draw(st.sampled_from(busy), label=name)
    if "ptr" in name or name in ("dst", "src", "addr", "data_dev", "cmo_desc") or (
            fn in BUFFER_CALLS and name == "data"):
        near = st.sampled_from(_pointers(rt))
        return data.draw(st.one_of(near, near.map(np.uint64)), label=name)
    if name in ("stream", "context"):
        return data.draw(st.sampled_from(_handles(rt)), label=name)
    if name == "addr_list":
        return data.draw(st.lists(st.sampled_from(_pointers(rt)), max_size=4), label=name)
    return data.draw(PLAUSIBLE.get(name, values), label=name)


#: For the pool calls (three times in four), values they take: props of a pool on device 0
#: or 1 that fits a small device, sizes of a few granules, attributes and their values.
POOL_PLAUSIBLE = {
    "pool_props": st.fixed_dictionaries(
        {"allocType": st.just(0), "handleType": st.sampled_from([0, 0, 2]),
         "location": st.fixed_dictionaries({"id": st.sampled_from([0, 0, 1]),
                                            "type": st.just(1)}),
         "maxSize": st.sampled_from([0, 2 * MiB, 8 * MiB, 16 * MiB, 10**6])}),
    "size": st.sampled_from([0, 1, 100, 2 * MiB, 3 * MiB, 8 * MiB]),
    "min_bytes_to_keep": st.sampled_from([0, 2 * MiB, 4 * MiB, 2**64 - 1]),
    "attr": st.integers(0, 9),
    "value": st.sampled_from([0, 1, 2 * MiB, 2**40, None]),
}


#: The calls that map a whole handle into a reservation (vir_ptr, size, offset, handle, flags).
MAPPING = {acl.rt.map_mem, acl.rt.mem_map_no_access}
_MANAGED_FACE = acl.rt.mem_alloc_managed.__module__
_LOCATIONS = st.fixed_dictionaries({"type": st.sampled_from([1, 1, 2, 2, 3, 4, 0, 9]),
                                    "id": st.sampled_from([0, 0, 1, 2, -1])})
#: For the managed-memory calls (three times in four): the one flag, whole 2 MiB pages,
#: the enums' values and one past them, locations, and lists as long as their counts.
MANAGED_PLAUSIBLE = {
    "flag": st.sampled_from([1, 1, 1, 0, 2]),
    "size": st.sampled_from([2 * MiB, 2 * MiB, 4 * MiB, 100, 2 * MiB + 1]),
    "advise": st.integers(0, 6), "attribute": st.integers(0, 9),
    "data_size": st.sampled_from([4, 8, 8, 16, 0]),
    "attributes": st.lists(st.integers(0, 9), max_size=3),
    "data_sizes": st.lists(st.sampled_from([4, 8, 16]), max_size=3),
    "location": _LOCATIONS, "ptrs": st.lists(st.sampled_from([UVM_BASE, 0]), max_size=2),
    "sizes": st.lists(st.sampled_from([2 * MiB, 2 * MiB, 100]), min_size=1, max_size=3),
    "count": st.integers(0, 3), "num_prefetch_locs": st.integers(0, 2),
    "prefetch_locs": st.lists(_LOCATIONS, max_size=2),
    "prefetch_loc_idxs": st.sampled_from([[0], [0], [0, 1], [1], [0, 0], []]),
    "flags": st.sampled_from([0, 0, 0, 1]), "dst_dev_id": st.integers(-1, 2),
}
#: For the virtual-memory calls (three times in four), values that make a handle mappable:
#: whole pages of the size (a handle maps only when its size is a multiple of the granularity,
#: 11-04), a prop that aclrtMallocPhysical takes (HBM huge or normal pages of device 0), flags 0.
VMM_PLAUSIBLE = {
    "size": st.sampled_from([2 * MiB, 2 * MiB, 4 * MiB, 6 * MiB]),
    "prop": st.fixed_dictionaries(
        {"handleType": st.just(0), "allocationType": st.just(0),
         "memAttr": st.sampled_from([4, 4, 5]),
         "location": st.fixed_dictionaries({"id": st.just(0), "type": st.just(1)}),
         "reserve": st.just(0)}),
    "flags": st.just(0),
}
#: A prop aclrtMallocPhysical takes (the exports of another process, _other_export).
VMM_PROP = {"handleType": 0, "allocationType": 0, "memAttr": 4,
            "location": {"id": 0, "type": 1}, "reserve": 0}


def _triples(rt) -> list[tuple[int, int, int]]:
    """(address, size, handle) that aclrtMapMem takes now: a live handle whose size is whole
    pages, at a page of a reservation where it fits, overlapping no mapping, in a
    reservation of its device (at most four places per reservation and handle)."""
    space = None if rt is None else rt.vmm.space
    if space is None:
        return []
    with space.lock:
        handles = [h for h in space.handles.values()
                   if h.refs and h.size % granule(h.page) == 0]
        found = []
        for r in list(space.reservations.values())[:8]:
            maps = [(m.ptr, m.end) for m in r.maps.values()]
            owner = r.device_id
            for h in handles[:8]:
                if owner is not None and owner != h.device_id:
                    continue
                step = granule(h.page)
                start = -(-r.ptr // step) * step
                places = 0
                while start + h.size <= r.end and places < 4:
                    if all(end <= start or start + h.size <= begin for begin, end in maps):
                        found.append((start, h.size, h.handle))
                        places += 1
                    start += step
        return found


def _well_formed(data, rt, fn) -> list | None:
    """Arguments the virtual-memory call ``fn`` takes now, or None: a reservation of whole
    pages, a handle of whole pages, a matching (page, size, handle) for a map, a mapping's
    start to unmap, a live handle to free, an empty reservation to release."""
    space = None if rt is None else rt.vmm.space
    name = fn.__name__
    pages = data.draw(st.integers(1, 3), label="pages") * 2 * MiB
    if name == "reserve_mem_address":
        return [pages, 0, 0, 0]
    if name == "malloc_physical":
        return [pages, data.draw(VMM_PLAUSIBLE["prop"], label="prop"), 0]
    if space is None:
        return None
    if fn in MAPPING:
        triples = _triples(rt)
        if triples:
            ptr, size, handle = data.draw(st.sampled_from(triples), label="triple")
            return [ptr, size, 0, handle, 0]
        return None
    with space.lock:
        choices = {"unmap_mem": [m for r in space.reservations.values() for m in r.maps],
                   "free_physical": [h.handle for h in space.handles.values() if h.refs],
                   "release_mem_address": [r.ptr for r in space.reservations.values()
                                           if not r.maps]}.get(name)
    if not choices:
        return None
    return [data.draw(st.sampled_from(sorted(choices)), label=f"{name}: well formed")]


def _well_formed_vpc(rt, fn) -> list | None:
    """Arguments a VPC call takes now, made through the face: two 32x16 NV12 pictures (the
    output a 16x8 YUV400 one for pyramid down) in DVPP memory sized by the rules (the source
    written), an open channel, whole-picture areas, a resize config and a border config of
    no borders, the default stream; None when there is no runtime or current device, or DVPP
    memory runs out."""
    from ascend_memsim.media.rules import strides_for, vpc_rules
    if rt is None or acl.rt.get_device()[-1] != 0:
        return None
    media = acl.media
    rules = vpc_rules(rt.profile)
    pics = []
    # pyramid down takes a YUV400 output half the input's size
    shapes = [(1, 32, 16), (0, 16, 8) if fn is media.dvpp_vpc_pyr_down_async else (1, 32, 16)]
    for fmt, width, height in shapes:
        ws, hs, size = strides_for(rules, fmt, width, height)
        ptr, ret = media.dvpp_malloc(size)
        if ret:
            return None
        acl.rt.memset(ptr, size, 16, size)
        pic = media.dvpp_create_pic_desc()
        for setter, value in ((media.dvpp_set_pic_desc_data, ptr),
                              (media.dvpp_set_pic_desc_size, size),
                              (media.dvpp_set_pic_desc_format, fmt),
                              (media.dvpp_set_pic_desc_width, width),
                              (media.dvpp_set_pic_desc_height, height),
                              (media.dvpp_set_pic_desc_width_stride, ws),
                              (media.dvpp_set_pic_desc_height_stride, hs)):
            setter(pic, value)
        pics.append(pic)
    channel = media.dvpp_create_channel_desc()
    media.dvpp_create_channel(channel)
    roi = media.dvpp_create_roi_config(0, 31, 0, 15)
    border = media.dvpp_create_border_config()
    batches = []
    for pic in pics:
        batch = media.dvpp_create_batch_pic_desc(1)
        one = media.dvpp_get_pic_desc(batch, 0)
        for field in ("data", "size", "format", "width", "height", "width_stride",
                      "height_stride"):
            getattr(media, f"dvpp_set_pic_desc_{field}")(
                one, getattr(media, f"dvpp_get_pic_desc_{field}")(pic))
        batches.append(batch)
    by_name = {"channel_desc": channel, "input_desc": pics[0], "output_desc": pics[1],
               "crop_area": roi, "paste_area": roi, "resize_config":
               media.dvpp_create_resize_config(), "border_config": border, "stream": 0,
               "reserve": 0, "src_batch_pic_descs": batches[0],
               "dst_batch_pic_descs": batches[1], "roi_nums": [1], "crop_areas": [roi],
               "paste_areas": [roi], "border_cfgs": [border]}
    return [by_name[name] for name in inspect.signature(fn).parameters]


def _other_export(rt, kind: str):
    """An IPC key or a shareable handle that another process of ``rt``'s machine exported
    (made now, before the call's snapshot), with pid validation off: what an import takes."""
    machine = rt.machine
    with machine.lock:
        helpers = [p for pid, p in machine.processes.items()
                   if pid != rt.pid and getattr(p, "fuzz_helper", False)]
    other = helpers[0] if helpers else rt.spawn_process(sanitizer="off")
    other.fuzz_helper = True
    with other.as_current():
        acl.rt.set_device(0)
        if kind == "key":
            ptr, _ = acl.rt.malloc(4096, 0)
            return acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, 1)[0]
        handle, _ = acl.rt.malloc_physical(2 * MiB, VMM_PROP, 0)
        return acl.rt.mem_export_to_shareable_handle(handle, 0, 1)[0]


def _sharing_args(data, rt, fn) -> list | None:
    """Arguments the sharing call ``fn`` takes now, or None: a live block to export, a key or
    shareable handle this process exported (whitelist, attributes, close) or another
    process exported (import), a handle of its own to export."""
    if rt is None:
        return None
    name, machine = fn.__name__, rt.machine
    flag = data.draw(st.sampled_from([0, 1]), label="flag")
    with machine.lock:
        mine = sorted(k for k, r in machine.ipc_keys.items() if r.runtime is rt)
        opened = sorted(k for k, r in machine.ipc_keys.items() if rt.pid in r.imports)
        shared = [v for v, r in machine.shareable.items() if r.runtime is rt]
        pids = sorted(machine.processes)
    space = rt.vmm.space
    handles = ([] if space is None else
               [h.handle for h in space.handles.values() if h.refs and h.shared is None])
    blocks = [(b.ptr, b.size) for device in rt.devices() for b in device.blocks()][:20]
    pick = lambda xs, label: data.draw(st.sampled_from(xs), label=label)  # noqa: E731
    if name == "device_get_bare_tgid":
        return []
    if name == "ipc_mem_get_export_key" and blocks:
        return [*pick(blocks, "block"), 65, flag]
    if name in ("ipc_mem_set_import_pid", "ipc_mem_set_attr") and mine:
        key = pick(mine, "key")
        return [key, pids] if name == "ipc_mem_set_import_pid" else [key, 0, flag]
    if name == "ipc_mem_close" and (mine or opened):
        return [pick(opened + mine, "key")]
    if name == "ipc_mem_import_by_key":
        return [_other_export(rt, "key"), flag]
    if name.startswith("mem_export_to_shareable_handle") and handles:
        handle = pick(handles, "handle")
        return [handle, 0, flag] if not name.endswith("v2") else [handle, flag, 1]
    if name.startswith("mem_set_pid_to_shareable_handle") and shared:
        value = pick(shared, "shareable")
        return [value, pids] if not name.endswith("v2") else [value, 1, pids]
    if name.startswith("mem_import_from_shareable_handle"):
        value = _other_export(rt, "shareable")
        return [value, 0] if not name.endswith("v2") else [value, 1, 0]
    return None


def _call(data, rt, seen: _Seen, fn):
    if fn.__module__ == _MEDIA and fn.__name__.startswith("dvpp_vpc_") and data.draw(
            st.booleans(), label="well formed"):
        # half the VPC calls get pictures, areas and configs they take, so that the VPC runs
        args = _well_formed_vpc(rt, fn)
        if args is not None:
            return args
    if fn.__module__ == _SHARING_FACE and data.draw(st.booleans(), label="well formed"):
        # half the sharing calls get what they take now, so exports, whitelists, imports
        # through other processes and closes run; else arbitrary arguments
        args = _sharing_args(data, rt, fn)
        if args is not None:
            return args
    if fn is acl.op.execute_v2 and rt is not None and rt.custom_allocators.registered and (
            data.draw(st.booleans(), label="the workspace op")):
        args = _workspace_op_args(data, rt)
        if args is not None:
            return args
    if fn.__module__ == _ALLOCATOR_FACE and data.draw(st.booleans(), label="well formed"):
        # half the custom allocator calls get what they take now (a descriptor still missing
        # what the call sets, a complete one and a live stream to register), so that
        # registrations are made and operators meet them
        args = _allocator_args(data, rt, fn)
        if args is not None:
            return args
    if (fn.__module__ == _VMM_FACE or fn in MAPPING) and data.draw(
            st.booleans(), label="well formed"):
        # half the virtual-memory calls get what they take now, when there is such a thing
        # (a map: a matching reservation page, handle and size), so that reserving, mapping,
        # access through mappings, unmapping and releasing run; else arbitrary arguments
        args = _well_formed(data, rt, fn)
        if args is not None:
            return args
    params = list(inspect.signature(fn).parameters.values())
    required = [p for p in params if p.default is inspect.Parameter.empty]
    count = data.draw(st.integers(len(required), len(params)), label=f"{fn.__name__} args")
    drawn: dict = {}
    for p in params[:count]:
        drawn[p.name] = _argument(data, rt, seen, fn, p.name, drawn)
    return list(drawn.values())


#: acl.util's conversions: plain values, and the core's exceptions on bad input
#: (docs/reference/errors.md)
RAISES = {acl.util.bytes_to_ptr, acl.util.numpy_to_ptr, acl.util.numpy_contiguous_to_ptr,
          acl.util.ptr_to_bytes, acl.util.ptr_to_numpy}


def _code_of(fn, result):
    """The aclError code a face call returned (None: the call returns no code)."""
    if fn in RAISES or fn is acl.get_recent_err_msg or getattr(fn, "bare", False):
        return None
    if fn is acl.app_log:
        return 0 if result is None else result
    return result[-1] if isinstance(result, tuple) else result


def _finalize_all():
    for _ in range(4):
        if acl.finalize() != 0:
            break
    assert Runtime.active == []


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
          deadline=None)
@given(config=configs, data=st.data())
def test_the_face_survives_arbitrary_calls(config, data):
    """See the module docstring: no exception escapes, every code is in the error code
    reference's table, a failed call changes nothing, the memory figures add up."""
    assert Runtime.active == [], "an earlier test left a runtime active"
    register_model(MODEL_PATH, MODEL)
    register_model(DYNAMIC_PATH, DYNAMIC)
    register_op(WORKSPACE_OP, BUILTIN_KERNELS["Add"], workspace=256)
    # Configs without an "output" print sanitizer reports to stderr: keep them out of the log.
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            _fuzz(config, data)
    finally:
        unregister_model(MODEL_PATH)
        unregister_model(DYNAMIC_PATH)
        unregister_op(WORKSPACE_OP)


def _share(ok: int, calls: int) -> str:
    """``ok`` of ``calls`` as a bucket for Hypothesis's statistics."""
    if not calls:
        return "no compute call"
    return "none" if not ok else ("under half" if 2 * ok < calls else "half or more")


def _fuzz(config, data):
    seen = _Seen()
    compute_calls = compute_ok = 0
    try:
        path = _write_config(config)
        # acl.init() without a config; None is not a path for pyacl ("|s")
        code = acl.init() if path is None else acl.init(path)
        assert code in CODES, \
            f"acl.init returned {code}, which docs/reference/errors.md does not list"
        if code:
            assert Runtime.active == [], "a failed acl.init left a runtime"
            assert acl.rt.malloc(100, 0) == (0, acl.ACL_ERROR_UNINITIALIZE)
            assert acl.init(_write_config(FALLBACK)) == 0
        steps = data.draw(st.integers(1, 40), label="steps")
        for _ in range(steps):
            rt = _runtime()
            if data.draw(st.booleans(), label="set a device first") and rt is not None:
                acl.rt.set_device(data.draw(st.integers(0, 1), label="device"))
            space, fn = data.draw(st.sampled_from(_pool(data, rt, seen)), label="function")
            args = _call(data, rt, seen, fn)
            name = fn.__name__
            before = _snapshot(rt, seen)
            pending = rt.streams.pending if rt is not None else 0
            message = acl.get_recent_err_msg()
            result = None
            try:
                Hostile.armed = True
                try:
                    result = fn(*args)
                finally:
                    Hostile.armed = False
            except AclError as error:
                # only acl.util's conversions raise (as pyacl's do); the rest return codes
                assert fn in RAISES, f"{space}.{name}{tuple(args)!r} raised {error!r}"
                assert int(error.code) in CODES, \
                    f"{name} raised {error!r}, not in docs/reference/errors.md"
                code = failed = int(error.code)
            else:
                code = _code_of(fn, result)
                # a call that returns no code failed when it left an error message
                failed = code or (code is None and acl.get_recent_err_msg() is not message)
                event(f"{name}: {'failed' if failed and code is None else code or 'ok'}")
                assert code is None or code in CODES, (
                    f"{space}.{name}{tuple(args)!r} returned {code!r}, which "
                    f"docs/reference/errors.md does not list")
            if (space, fn) in COMPUTE_FACE:
                compute_calls += 1
                compute_ok += not failed
            if failed and name not in ("init", "finalize") and not (
                    name in RUNS_QUEUED_WORK and pending):
                assert _snapshot(_runtime(), seen) == before, (
                    f"{space}.{name}{tuple(args)!r} failed ({code or acl.get_recent_err_msg()})"
                    f" but changed the state")
            _check_accounting(_runtime())
            seen.note(_runtime(), fn, result)
        event(f"compute calls that succeed: {_share(compute_ok, compute_calls)}")
    finally:
        _finalize_all()


def test_the_readme_lists_every_code_the_face_can_return():
    """Every aclError code the simulator knows (a fault may name any) is in the error code
    reference's table, which the fuzz test reads; 107017 and 200000 were missing (issue 9)."""
    assert {int(code) for code in ErrorCode} <= CODES
    assert {107017, 200000} <= CODES


HOSTILE = [Hostile(ValueError), Hostile(RuntimeError, repr_raises=False), Hostile(None, 7),
           Hostile(ZeroDivisionError), [Hostile(KeyError)], HostileInt(5)]


def test_hostile_arguments_give_a_code_and_a_message(a2):
    """Every face function, with a hostile object in each argument position (the others 0):
    no exception of the object's own escapes (124 functions let one through); a
    failed call returns its code and leaves a message (acl.util's conversions raise the
    core's exception)."""
    escaped = []
    for space, fn in FACE[2:]:
        params = list(inspect.signature(fn).parameters)
        for i, name in enumerate(params):
            for bad in HOSTILE:
                args = [0] * len(params)
                args[i] = bad
                before = acl.get_recent_err_msg()
                Hostile.armed = True
                try:
                    with contextlib.redirect_stderr(io.StringIO()):
                        code = _code_of(fn, fn(*args))
                    if code and acl.get_recent_err_msg() is before:
                        escaped.append(f"{space}.{fn.__name__}({name}): {code} with no message")
                except AclError as error:
                    if fn not in RAISES:
                        escaped.append(f"{space}.{fn.__name__}({name}={bad}): {error!r}")
                except Exception as error:  # the point of the test
                    escaped.append(f"{space}.{fn.__name__}({name}={type(bad).__name__}): "
                                   f"{type(error).__name__}: {error}")
                finally:
                    Hostile.armed = False
    assert not escaped, "\n".join(escaped)
