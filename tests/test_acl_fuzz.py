"""A fuzz test of the whole pyacl face: arbitrary arguments in arbitrary sequences.

Each example starts the face with an arbitrary ``acl.init`` config (good or bad), then calls
face functions with arguments of every kind: ints of every size, bools, floats, None, str,
bytes, containers, numpy scalars and arrays, and pointers at, near and inside live blocks
and of other devices. After each call it checks:

* no exception escapes the face (``acl.util`` may raise the core's exceptions, as documented);
* every code returned is one the README's error table lists;
* a failed call changes nothing: memory figures, usage info, the free runs (so the next
  address), the blocks, the sanitizer's quarantine, host memory and queued work;
* for each memory, free + the footprints of the live blocks == total.

The budget is the Hypothesis profile's (``HYPOTHESIS_PROFILE=thorough`` searches 2,000
examples, the default profile 50).
"""

import contextlib
import inspect
import io
import json
import os
import re
import tempfile

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ascend_memsim import AclError, Runtime, acl
from ascend_memsim.data.host import REGISTERED_BASE, mapped
from ascend_memsim.memory.args import int_or_none
from ascend_memsim.memory.constants import ErrorCode
from ascend_memsim.memory.rules import device_base

MiB = 1 << 20
README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def _readme_codes() -> set[int]:
    """The codes of the README's "Errors" section."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("\n## Errors"):]
    section = section[:section.index("\n## ", 1)]
    return {int(code) for code in re.findall(r"\b[1-5]\d{5}\b", section)}


CODES = _readme_codes() | {0}

# Every function of the face, with the namespace it hangs from: acl itself (init, finalize,
# data buffers, tensor descriptors, ...), acl.rt, acl.op, acl.mdl, acl.util, acl.media.
FACE = [("acl", acl.init), ("acl", acl.finalize),
        *[("acl", getattr(acl, name)) for name in acl.__all__
          if name not in ("init", "finalize") and not name.isupper()
          and inspect.isfunction(getattr(acl, name, None))],
        *[(space, getattr(getattr(acl, space), name))
          for space in ("rt", "op", "mdl", "util", "media")
          for name in getattr(acl, space).__all__]]
MEMORY_FACE = [(space, fn) for space, fn in FACE if space in ("rt", "media", "util")]
ALLOCATING = [(space, fn) for space, fn in MEMORY_FACE if fn.__name__ in (
    "malloc", "malloc_align32", "malloc_cached", "malloc_with_cfg", "malloc_for_task_scheduler",
    "free", "free_with_dev_sync", "dvpp_malloc", "dvpp_free", "malloc_host", "free_host",
    "memcpy", "memset", "memcpy_async", "memset_async", "numpy_to_ptr", "bytes_to_ptr")]
# The calls that may run queued work: when work is queued, their error may come from that
# work, which ran (a synchronising call cannot undo it).
RUNS_QUEUED_WORK = {"synchronize_stream", "synchronize_device", "destroy_stream",
                    "destroy_context", "free_with_dev_sync", "synchronize_event",
                    "synchronize_event_with_timeout", "query_event", "query_event_status",
                    "query_event_wait_status", "execute", "execute_v2", "execute_with_handle",
                    "cast", "process_report", "unload", "destroy_event", "reset_device"}

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
values = st.one_of(scalars, numpy_values, containers)
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


def _write_config(config) -> str | None:
    if config is None:
        return None
    path = os.path.join(_DIR, f"acl-{os.getpid()}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(config if isinstance(config, str) else json.dumps(config))
    return path


def _runtime():
    return Runtime.active[-1] if Runtime.active else None


def _snapshot(rt):
    """Everything a failed call must leave as it was."""
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
        ))
    host = [(b.ptr, b.size) for b in rt.host.blocks()]
    return (rt.profile, devices, host, rt.streams.pending, rt.acl_initialized)


def _check_accounting(rt):
    if rt is None:
        return
    for device in rt.devices():
        device.check_invariants()
        live = {}
        for block in device.blocks():
            live[block.memory] = live.get(block.memory, 0) + block.footprint
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
    return found


def _handles(rt):
    """Stream and context handles: live, destroyed and made up."""
    found = [0, None, 1 << 32, (1 << 33) + 64]
    if rt is not None:
        streams = rt.streams
        found += list(streams._streams)[:8] + list(streams._contexts)[:8]
    return found


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
    "cfg": st.one_of(st.none(), st.dictionaries(st.sampled_from([0, 1, 2, 9]),
                                                st.integers(0, 3), max_size=2)),
    "shape": st.one_of(st.integers(0, 8), st.lists(st.integers(0, 4), max_size=3)),
    "np_type": st.one_of(st.sampled_from([0, 1, 2, 11, 12, 23, 99, "int8", "O", "1/0"])),
    "data": st.binary(min_size=0, max_size=32).map(lambda b: bytes(bytearray(b))),
    "array": numpy_values,
    "dims": st.lists(st.integers(-2, 5), max_size=3), "data_type": st.integers(-1, 13),
    "format": st.integers(-1, 4), "index": st.integers(-1, 3), "flag": st.integers(0, 9),
    "priority": st.integers(0, 8), "model_id": st.integers(0, 3),
    "op_type": st.sampled_from(["Add", "Cast", "Abs", "NoSuchOp", ""]),
    "name": st.text(max_size=4), "attr_name": st.text(max_size=4),
}
#: Parameters that always get a plausible value: a wait that must stay short, and paths
#: that must name no real file.
ALWAYS = {
    "timeout": st.sampled_from([0, 1, 5]),
    "model_path": st.just("/nonexistent/model.om"), "file_name": st.just("/nonexistent/x"),
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
    return value if known or not mapped(addr, 1, False) else 0x1234


def _argument(data, rt, name: str):
    """A value for parameter ``name`` (never the process's own memory, see
    :func:`_not_process_memory`)."""
    value = _draw_argument(data, rt, name)
    if "ptr" in name or name in ("dst", "src", "addr"):
        return _not_process_memory(rt, value)
    return value


def _draw_argument(data, rt, name: str):
    """A value for parameter ``name``: anything at all (one time in four), else something
    near what it wants."""
    if name in ALWAYS:
        return data.draw(ALWAYS[name], label=name)
    anything = data.draw(st.integers(0, 3), label=f"{name}: anything") == 0
    if anything or name == "config_path":
        return data.draw(st.one_of(st.none(), st.just("/nonexistent/acl.json"), values)
                         if name == "config_path" else values, label=name)
    if "ptr" in name or name in ("dst", "src", "addr"):
        near = st.sampled_from(_pointers(rt))
        return data.draw(st.one_of(near, near.map(np.uint64)), label=name)
    if name in ("stream", "context"):
        return data.draw(st.sampled_from(_handles(rt)), label=name)
    if name == "addr_list":
        return data.draw(st.lists(st.sampled_from(_pointers(rt)), max_size=4), label=name)
    return data.draw(PLAUSIBLE.get(name, values), label=name)


def _call(data, rt, fn):
    params = list(inspect.signature(fn).parameters.values())
    required = [p for p in params if p.default is inspect.Parameter.empty]
    count = data.draw(st.integers(len(required), len(params)), label=f"{fn.__name__} args")
    return [_argument(data, rt, p.name) for p in params[:count]]


#: acl.util's conversions: plain values, and the core's exceptions on bad input (README)
RAISES = {acl.util.bytes_to_ptr, acl.util.numpy_to_ptr, acl.util.ptr_to_bytes,
          acl.util.ptr_to_numpy}


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
    assert Runtime.active == [], "an earlier test left a runtime active"
    # Configs without an "output" print sanitizer reports to stderr: keep them out of the log.
    with contextlib.redirect_stderr(io.StringIO()):
        _fuzz(config, data)


def _fuzz(config, data):
    try:
        code = acl.init(_write_config(config))
        assert code in CODES, f"acl.init returned {code}, which the README does not list"
        if code:
            assert Runtime.active == [], "a failed acl.init left a runtime"
            assert acl.rt.malloc(100, 0) == (0, acl.ACL_ERROR_UNINITIALIZE)
            assert acl.init(_write_config(FALLBACK)) == 0
        steps = data.draw(st.integers(1, 40), label="steps")
        for _ in range(steps):
            rt = _runtime()
            if data.draw(st.booleans(), label="set a device first") and rt is not None:
                acl.rt.set_device(data.draw(st.integers(0, 1), label="device"))
            # init and finalize end or restart the runtime: one call in twenty
            rare = data.draw(st.integers(0, 19), label="init or finalize") == 0
            # a third of the calls allocate, free or move bytes, a third come from the memory
            # face (acl.rt, acl.media, acl.util), the rest from the whole face
            pool = FACE[:2] if rare else (ALLOCATING, MEMORY_FACE, FACE[2:])[
                data.draw(st.integers(0, 2), label="pool")]
            space, fn = data.draw(st.sampled_from(pool), label="function")
            args = _call(data, rt, fn)
            name = fn.__name__
            before = _snapshot(rt)
            pending = rt.streams.pending if rt is not None else 0
            try:
                result = fn(*args)
            except AclError as error:
                # only acl.util's conversions raise (as pyacl's do); the rest return codes
                assert fn in RAISES, f"{space}.{name}{tuple(args)!r} raised {error!r}"
                assert int(error.code) in CODES, f"{name} raised {error!r}, not in the README"
                code = int(error.code)
            else:
                code = _code_of(fn, result)
                event(f"{name}: {'ok' if not code else code}")
                assert code is None or code in CODES, (
                    f"{space}.{name}{tuple(args)!r} returned {code!r}, which the README does "
                    f"not list")
            if code and name not in ("init", "finalize") and not (
                    name in RUNS_QUEUED_WORK and pending):
                assert _snapshot(_runtime()) == before, (
                    f"{name}{tuple(args)!r} failed with {code} but changed the state")
            _check_accounting(_runtime())
    finally:
        _finalize_all()


def test_the_readme_lists_every_code_the_face_can_return():
    """Every aclError code the simulator knows (a fault may name any) is in the README's
    error table, which the fuzz test reads; 107017 and 200000 were missing (issue 9)."""
    assert {int(code) for code in ErrorCode} <= CODES
    assert {107017, 200000} <= CODES
