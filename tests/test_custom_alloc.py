"""Custom memory allocators (hicann/runtime docs/zh/api_ref/11-08_custom_memory_allocator.md,
include/external/acl/acl_rt_allocator.h, src/acl/aclrt_impl/allocator.cpp): descriptors,
registration on a stream, the workspace of operators and models taken through a registered
allocator (hicann/ge acl_resource_manager.cpp, external_allocator.cc), events and statistics,
and pyacl's binding as python/pyACL/rt/rt_allocator.cpp has it."""

import json
import sys
import threading
import warnings

import numpy as np
import pytest
from test_trace_schema import errors as schema_errors

from ascend_memsim import (
    MiB,
    Runtime,
    acl,
    aclrt,
    device_variable,
    register_model,
    register_op,
    unregister_model,
    unregister_op,
    unregister_variable,
)
from ascend_memsim.compute.kernels import BUILTIN_KERNELS
from ascend_memsim.compute.ops import registered_ops
from ascend_memsim.memory.errors import InvalidArgument, InvalidArgumentType, InvalidHandle
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.stats import MemoryStats
from ascend_memsim.observe.trace import Recorder
from ascend_memsim.runtime.custom_alloc import PYACL_OBJ

WS = 4096
OP = "ScaleWithWorkspace"


def _scale(inputs, attrs):
    return inputs[0] * 2


_scale.workspace = WS


@pytest.fixture
def rt():
    """An active A2 runtime (64 MiB) with device 0 set, and an op that takes WS bytes."""
    with Runtime("A2", hbm_bytes=64 * MiB) as runtime, registered_ops({OP: _scale}):
        acl.rt.set_device(0)
        yield runtime


class Caching:
    """A user allocator over aclrtMalloc that keeps what it is given back until ``drain``
    (as 11-08 asks: memory goes back to the system only after the stream is synchronised).
    Blocks are dicts; it records every call."""

    def __init__(self, give_back=False):
        self.calls, self.cache, self.give_back = [], [], give_back

    def alloc(self, obj, size):
        self.calls.append(("alloc", obj, size))
        ptr, ret = acl.rt.malloc(size, 0)
        return None if ret else {"ptr": ptr, "size": size}

    def alloc_advise(self, obj, size, addr):
        self.calls.append(("alloc_advise", obj, size, addr))
        return self.alloc(obj, size)

    def free(self, obj, block):
        self.calls.append(("free", obj, block["ptr"]))
        if self.give_back:
            acl.rt.free(block["ptr"])
        else:
            self.cache.append(block["ptr"])

    def get_addr(self, block):
        self.calls.append(("get_addr", block["ptr"]))
        return block["ptr"]

    def drain(self):
        for ptr in self.cache:
            assert acl.rt.free(ptr) == 0
        self.cache = []


def _desc(rt, user, advise=False):
    """A descriptor of ``user``'s callbacks through the Pythonic core (C semantics)."""
    ca = rt.custom_allocators
    desc = ca.create_desc()
    ca.set_obj(desc, user)
    ca.set_func(desc, "alloc", lambda obj, size: obj.alloc(obj, size))
    ca.set_func(desc, "free", lambda obj, block: obj.free(obj, block))
    ca.set_func(desc, "get_addr", lambda block: user.get_addr(block))
    if advise:
        ca.set_func(desc, "alloc_advise", lambda obj, size, addr: obj.alloc_advise(obj, size, addr))
    return desc


class Op:
    """An x -> 2x operator on 6 floats, its buffers made through the face."""

    def __init__(self):
        self.x = np.arange(6, dtype=np.float32)
        self.desc = acl.create_tensor_desc(acl.ACL_FLOAT, [6], acl.ACL_FORMAT_ND)
        size = self.size = acl.get_tensor_desc_size(self.desc)
        self.dx, _ = acl.rt.malloc(size, 0)
        self.dy, _ = acl.rt.malloc(size, 0)
        acl.rt.memcpy(self.dx, size, acl.util.numpy_to_ptr(self.x), size, 1)
        self.bx = acl.create_data_buffer(self.dx, size)
        self.by = acl.create_data_buffer(self.dy, size)

    def run(self, stream, op=OP):
        return acl.op.execute_v2(op, [self.desc], [self.bx], [self.desc], [self.by], 0, stream)

    def result(self):
        y = np.zeros_like(self.x)
        acl.rt.memcpy(acl.util.numpy_to_ptr(y), self.size, self.dy, self.size, 2)
        return y

    def close(self):
        for buf, dev in ((self.bx, self.dx), (self.by, self.dy)):
            acl.destroy_data_buffer(buf)
            acl.rt.free(dev)
        acl.destroy_tensor_desc(self.desc)


# -- descriptors and registration (allocator.cpp) ----------------------------------------------

def test_descriptor_calls_refuse_null_values_and_dead_handles(rt):
    ca = rt.custom_allocators
    desc = ca.create_desc()
    # allocator.cpp: ACL_REQUIRES_NOT_NULL on the descriptor, the object, each function
    with pytest.raises(InvalidArgument, match="allocator is NULL"):
        ca.set_obj(desc, None)
    with pytest.raises(InvalidArgument, match="func is NULL"):
        ca.set_func(desc, "free", None)
    with pytest.raises(InvalidArgument, match="allocatorDesc is NULL"):
        ca.set_func(0, "alloc", print)
    with pytest.raises(InvalidArgumentType):
        ca.set_func(desc, "alloc", 5)
    ca.destroy_desc(desc)
    # DECISION: a destroyed descriptor is ACL_ERROR_RT_INVALID_HANDLE, as for streams
    with pytest.raises(InvalidHandle):
        ca.set_obj(desc, object())
    with pytest.raises(InvalidHandle):
        ca.destroy_desc(desc)
    assert acl.rt.allocator_destroy_desc(0) == acl.ACL_ERROR_INVALID_PARAM


@pytest.mark.parametrize("missing", ["obj", "alloc", "free", "get_addr"])
def test_register_needs_the_object_and_three_functions(rt, stream, missing):
    # allocator.cpp aclrtAllocatorRegisterImpl: obj, allocFunc, freeFunc and
    # getAddrFromBlockFunc must not be NULL; allocAdviseFunc may be
    ca = rt.custom_allocators
    desc = ca.create_desc()
    if missing != "obj":
        ca.set_obj(desc, object())
    for kind in ("alloc", "free", "get_addr"):
        if kind != missing:
            ca.set_func(desc, kind, print)
    with pytest.raises(InvalidArgument, match="allocatorDesc->"):
        ca.register(stream, desc)
    assert ca.registered == {}


def test_register_keeps_a_copy_and_the_last_registration_wins(rt, stream):
    user, other = Caching(), Caching()
    ca = rt.custom_allocators
    first, second = _desc(rt, user), _desc(rt, other)
    with pytest.raises(InvalidArgument, match="stream is NULL"):
        ca.register(0, first)   # 11-08 (aclrtAllocatorRegister): stream must not be NULL
    ca.register(stream, first)
    desc, obj, alloc, _, advise, _ = ca.get_by_stream(stream)
    assert (desc, obj, advise) == (first, user, None)
    # the runtime registered a copy: later changes to the descriptor do not reach it
    ca.set_func(first, "alloc", print)
    ca.destroy_desc(first)
    assert ca.get_by_stream(stream)[2] is alloc
    # 11-08 (约束说明): for one stream, the last registration is the one that holds
    ca.register(stream, second)
    assert ca.get_by_stream(stream)[:2] == (second, other)
    ca.destroy_desc(second)
    ca.unregister(stream)


def test_get_by_stream_and_unregister_codes(rt, stream):
    # allocator.cpp: a stream with nothing registered is ACL_ERROR_INVALID_PARAM for get;
    # 11-08 (aclrtAllocatorUnregister): unregistering it does nothing and succeeds
    assert acl.rt.allocator_get_by_stream(stream) == (0, 0, None, None, None, None, 100000)
    assert "not registered with any allocator" in acl.get_recent_err_msg()
    assert acl.rt.allocator_unregister(stream) == 0
    assert acl.rt.allocator_unregister(stream) == 0
    assert acl.rt.allocator_unregister(0) == acl.ACL_ERROR_INVALID_PARAM
    assert acl.rt.allocator_register(stream, 0) == acl.ACL_ERROR_INVALID_PARAM
    assert aclrt.aclrtAllocatorGetByStream is acl.rt.allocator_get_by_stream


def test_a_registration_outlives_its_stream_and_leaks_at_finalize():
    # allocator.cpp keys g_AllocatorDesMap by the stream and nothing erases it when the
    # stream is destroyed; DECISION: what is never unregistered or destroyed is a leak
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        acl.rt.set_device(0)
        stream, _ = acl.rt.create_stream()
        desc = _desc(rt, Caching())
        rt.custom_allocators.register(stream, desc)
        assert acl.rt.destroy_stream(stream) == 0
        assert rt.custom_allocators.get_by_stream(stream)[0] == desc
    leaks = [r.where for r in rt.sanitizer.reports if r.kind == "leak"]
    assert len(leaks) == 2
    assert any("allocator descriptor" in m for m in leaks)
    assert any(f"registered on stream {stream:#x}" in m for m in leaks)


# -- operators and models take their workspace through it ------------------------------------

def test_an_operators_workspace_comes_from_the_registered_allocator(rt, stream):
    user = Caching()
    rt.custom_allocators.register(stream, _desc(rt, user))
    op = Op()
    assert op.run(stream) == 0
    ptr = user.calls[0] and user.calls[-1][2]
    # alloc(obj, size), then the block's address; free right after the launch, before the
    # stream runs (external_allocator.cc; 11-08: synchronise before memory goes back)
    assert user.calls == [("alloc", user, WS), ("get_addr", ptr), ("free", user, ptr)]
    assert rt.streams.pending == 1
    assert acl.rt.synchronize_stream(stream) == 0
    assert list(op.result()) == [0, 2, 4, 6, 8, 10]
    user.drain()
    op.close()
    rt.custom_allocators.unregister(stream)


def test_memory_given_back_before_the_stream_ran_is_a_use_after_free(rt, stream):
    # 11-08 (约束说明): synchronise the stream before the allocator gives memory back to the
    # system
    user = Caching(give_back=True)
    rt.custom_allocators.register(stream, _desc(rt, user))
    op = Op()
    assert op.run(stream) == 0
    assert acl.rt.synchronize_stream(stream) == acl.ACL_ERROR_RT_PARAM_INVALID
    kinds = [r.kind for r in rt.sanitizer.reports]
    assert kinds == ["free-with-pending-work", "use-after-free"]
    op.close()
    rt.custom_allocators.unregister(stream)


def test_a_null_block_fails_the_launch_and_queues_nothing(rt, stream):
    ca = rt.custom_allocators
    calls = []
    desc = ca.create_desc()
    ca.set_obj(desc, 1)
    ca.set_func(desc, "alloc", lambda obj, size: calls.append(size))   # returns None: NULL
    ca.set_func(desc, "free", lambda obj, block: calls.append("free"))
    ca.set_func(desc, "get_addr", lambda block: calls.append("get_addr"))
    ca.register(stream, desc)
    op = Op()
    assert op.run(stream) == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
    assert "gave no block (NULL) for a 4096-byte workspace" in acl.get_recent_err_msg()
    assert calls == [WS] and rt.streams.pending == 0
    op.close()
    ca.unregister(stream)
    ca.destroy_desc(desc)


def test_an_address_outside_device_memory_is_refused_and_the_block_given_back(rt, stream):
    ca = rt.custom_allocators
    freed = []
    desc = ca.create_desc()
    ca.set_obj(desc, 1)
    ca.set_func(desc, "alloc", lambda obj, size: "block")
    ca.set_func(desc, "free", lambda obj, block: freed.append(block))
    ca.set_func(desc, "get_addr", lambda block: 0x1234)
    ca.register(stream, desc)
    op = Op()
    assert op.run(stream) == acl.ACL_ERROR_RT_PARAM_INVALID
    assert freed == ["block"] and rt.streams.pending == 0
    op.close()
    ca.unregister(stream)
    ca.destroy_desc(desc)


def test_work_the_stream_refuses_gives_the_block_back_unseen(rt, stream, monkeypatch):
    # a stream being destroyed takes no new work (streams.py): the launch fails after the
    # workspace was taken; it goes back to the allocator and no observer hears of it
    stats = MemoryStats.attach(rt)
    user = Caching()
    rt.custom_allocators.register(stream, _desc(rt, user))
    op = Op()

    def refuse(*args):
        raise InvalidHandle("the stream is being destroyed")

    monkeypatch.setattr(rt.streams, "enqueue", refuse)
    assert op.run(stream) == acl.ACL_ERROR_RT_INVALID_HANDLE
    monkeypatch.undo()
    assert [c[0] for c in user.calls] == ["alloc", "get_addr", "free"]
    assert "num_allocator_allocs" not in stats.snapshot(0)
    user.drain()
    op.close()
    rt.custom_allocators.unregister(stream)


def test_a_stream_whose_first_operator_ran_without_one_keeps_the_engines(rt, stream):
    # acl_resource_manager.cpp GetAllocators: "use the default allocator throughout the entire
    # lifecycle of the stream (even if the user later registers an external allocator)";
    # 11-08: register before aclopExecuteV2
    op = Op()
    assert op.run(stream) == 0
    user = Caching()
    rt.custom_allocators.register(stream, _desc(rt, user))
    assert op.run(stream) == 0
    assert user.calls == []
    other, _ = acl.rt.create_stream()
    rt.custom_allocators.register(other, _desc(rt, user))
    assert op.run(other) == 0 and user.calls[0] == ("alloc", user, WS)
    acl.rt.synchronize_device()
    user.drain()
    op.close()


def test_a_kernel_without_workspace_asks_nothing(rt, stream):
    user = Caching()
    rt.custom_allocators.register(stream, _desc(rt, user))
    op = Op()
    with registered_ops(NoWorkspace=BUILTIN_KERNELS["Relu"]):
        assert op.run(stream, "NoWorkspace") == 0
    assert user.calls == []
    acl.rt.synchronize_stream(stream)
    op.close()


def test_a_models_work_memory_asks_alloc_advise_at_its_last_address(rt, stream):
    # external_allocator.cc MallocAdvise: alloc_advise_func when the descriptor has one
    spec = {"inputs": [{"name": "x", "shape": [6], "dtype": "float32"}],
            "outputs": [{"name": "y", "shape": [6], "dtype": "float32"}],
            "work_bytes": 8192}
    register_model("/nonexistent/ws.om", spec)
    try:
        user = Caching()
        rt.custom_allocators.register(stream, _desc(rt, user, advise=True))
        model, ret = acl.mdl.load_from_file("/nonexistent/ws.om")
        assert ret == 0
        op = Op()
        ins, outs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
        acl.mdl.add_dataset_buffer(ins, op.bx)
        acl.mdl.add_dataset_buffer(outs, op.by)
        assert acl.mdl.execute_async(model, ins, outs, stream) == 0
        first = user.calls[-1][2]
        assert acl.mdl.execute_async(model, ins, outs, stream) == 0
        advised = [c for c in user.calls if c[0] == "alloc_advise"]
        assert advised == [("alloc_advise", user, 8192, 0),
                           ("alloc_advise", user, 8192, first)]
        # aclmdlExecute has no stream: the engine takes no external allocator
        assert acl.mdl.execute(model, ins, outs) == 0 and len(advised) == 2
        # nor does a model on a stream whose first operator ran without one
        other, _ = acl.rt.create_stream()
        assert op.run(other) == 0
        rt.custom_allocators.register(other, _desc(rt, user, advise=True))
        assert acl.mdl.execute_async(model, ins, outs, other) == 0
        assert len([c for c in user.calls if c[0] == "alloc_advise"]) == 2
        rt.custom_allocators.unregister(other)
        assert acl.rt.synchronize_stream(stream) == 0
        user.drain()
        acl.mdl.destroy_dataset(ins)
        acl.mdl.destroy_dataset(outs)
        acl.mdl.unload(model)
        op.close()
    finally:
        unregister_model("/nonexistent/ws.om")


# -- events and statistics ---------------------------------------------------------------------

def test_traced_counted_and_replayed(rt, stream):
    stats = MemoryStats.attach(rt)
    recorder = Recorder(rt)
    recorder.start()
    user = Caching()
    desc = _desc(rt, user)
    rt.custom_allocators.register(stream, desc)
    op = Op()
    assert op.run(stream) == 0
    acl.rt.synchronize_stream(stream)
    user.drain()
    rt.custom_allocators.unregister(stream)
    recorder.stop()
    custom = [e for e in recorder.trace.events if e["event"].startswith("allocator_")]
    assert [e["event"] for e in custom] == ["allocator_register", "allocator_alloc",
                                            "allocator_free", "allocator_unregister"]
    assert custom[1]["size"] == WS and custom[1]["call"] == "aclopExecuteV2"
    counts = stats.snapshot(0)
    assert counts["num_allocator_registers"] == counts["num_allocator_unregisters"] == 1
    assert counts["num_allocator_allocs"] == counts["num_allocator_frees"] == 1
    assert counts["allocator_bytes.peak"] == WS and counts["allocator_bytes.current"] == 0
    result = replay(recorder.trace, "A2", capacity=64 * MiB)
    assert result.problems == [] and result.failures == 0
    for line in recorder.trace.dumps().splitlines():
        assert schema_errors(json.loads(line)) == [], line
    op.close()
    rt.custom_allocators.destroy_desc(desc)


def test_a_failed_call_counts_nothing(rt, stream):
    stats = MemoryStats.attach(rt)
    ca = rt.custom_allocators
    desc = ca.create_desc()
    ca.set_obj(desc, 1)
    ca.set_func(desc, "alloc", lambda obj, size: None)
    ca.set_func(desc, "free", lambda obj, block: None)
    ca.set_func(desc, "get_addr", lambda block: 0)
    assert acl.rt.allocator_register(0, desc) == acl.ACL_ERROR_INVALID_PARAM
    ca.register(stream, desc)
    op = Op()
    assert op.run(stream) == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
    # a block whose address is refused is given back, and nothing is counted either
    ca.set_func(desc, "alloc", lambda obj, size: "block")
    ca.register(stream, desc)
    assert op.run(stream) == acl.ACL_ERROR_RT_PARAM_INVALID
    counts = stats.snapshot(0)
    assert counts["num_allocator_registers"] == 2
    assert "num_allocator_allocs" not in counts and "num_allocator_frees" not in counts
    op.close()
    ca.unregister(stream)
    ca.destroy_desc(desc)


# -- pyacl's binding (rt_allocator.cpp) --------------------------------------------------------

def _pyacl_desc(alloc, free=lambda allocator, block: None, get_addr=lambda block: block):
    desc = acl.rt.allocator_create_desc()
    assert acl.rt.allocator_set_obj_to_desc(desc, 0) == 0   # &allocator is never NULL
    assert acl.rt.allocator_set_alloc_func_to_desc(desc, alloc) == 0
    assert acl.rt.allocator_set_free_func_to_desc(desc, free) == 0
    assert acl.rt.allocator_set_get_addr_from_block_func_to_desc(desc, get_addr) == 0
    return desc


def test_pyacl_calls_the_alloc_function_and_the_runtime_gets_null(rt, stream):
    calls = []

    def alloc(allocator, size):
        calls.append((allocator, size))
        ptr, _ = acl.rt.malloc(size, 0)
        taken.append(ptr)
        return ptr

    taken = []
    desc = _pyacl_desc(alloc)
    assert acl.rt.allocator_register(stream, desc) == 0
    op = Op()
    with pytest.warns(RuntimeWarning, match="rt_allocator.cpp"):
        assert op.run(stream) == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
    assert "rt_allocator.cpp AllocatorAllocFunc" in acl.get_recent_err_msg()
    # called with the documented arguments; the object is the binding's local's address
    assert calls == [(PYACL_OBJ, WS)] and rt.streams.pending == 0
    assert acl.rt.free(taken[0]) == 0   # what the Python function took
    assert acl.rt.allocator_unregister(stream) == 0
    assert acl.rt.allocator_destroy_desc(desc) == 0
    op.close()


def test_pyacl_cuts_the_size_to_32_bits(rt, stream):
    # Py_BuildValue("kI", allocator, size): size as unsigned int
    sizes = []
    desc = _pyacl_desc(lambda allocator, size: sizes.append(size))
    acl.rt.allocator_register(stream, desc)
    op = Op()
    with registered_ops(Huge=_huge):
        assert op.run(stream, "Huge") == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
    assert sizes == [16]
    acl.rt.allocator_unregister(stream)
    acl.rt.allocator_destroy_desc(desc)
    op.close()


def _huge(inputs, attrs):
    return inputs[0]


_huge.workspace = (1 << 32) + 16


def test_pyacl_keeps_one_function_of_each_kind_for_every_descriptor(rt, stream):
    # rt_allocator.cpp: g_allocFunc is process-global, replaced by every successful set
    first, second = [], []
    desc = _pyacl_desc(lambda allocator, size: first.append(size))
    acl.rt.allocator_register(stream, desc)
    other = acl.rt.allocator_create_desc()
    assert acl.rt.allocator_set_alloc_func_to_desc(other, lambda a, s: second.append(s)) == 0
    # a failed set (NULL descriptor) replaces nothing
    assert acl.rt.allocator_set_alloc_func_to_desc(0, print) == acl.ACL_ERROR_INVALID_PARAM
    op = Op()
    assert op.run(stream) == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
    assert (first, second) == ([], [WS])
    # an exception in the Python function is logged; the runtime still gets NULL
    acl.rt.allocator_set_alloc_func_to_desc(other, lambda a, s: 1 / 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert op.run(stream) == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
    acl.rt.allocator_unregister(stream)
    for d in (desc, other):
        acl.rt.allocator_destroy_desc(d)
    op.close()


def test_pyacl_registration_codes(rt, stream):
    desc = acl.rt.allocator_create_desc()
    assert desc != 0
    # no object, no functions yet: allocator.cpp refuses the registration
    assert acl.rt.allocator_register(stream, desc) == acl.ACL_ERROR_INVALID_PARAM
    assert "allocatorDesc->obj is NULL" in acl.get_recent_err_msg()
    assert acl.rt.allocator_register(stream, desc + 64) == acl.ACL_ERROR_RT_INVALID_HANDLE
    assert acl.rt.allocator_set_obj_to_desc(desc, "x") == acl.ACL_ERROR_INVALID_PARAM
    assert acl.rt.allocator_destroy_desc(desc) == 0
    assert acl.rt.allocator_destroy_desc(desc) == acl.ACL_ERROR_RT_INVALID_HANDLE


# -- threads -------------------------------------------------------------------------------------

def test_threads_register_launch_and_unregister_at_once(rt):
    # each thread its own stream and allocator (11-08: one allocator must not serve streams
    # running at once); the runtime's tables stay whole and every block comes back
    count, rounds = 4, 25
    users = [Caching() for _ in range(count)]
    errors = []
    start = threading.Barrier(count)
    old = sys.getswitchinterval()

    def worker(i):
        try:
            acl.rt.set_device(0)
            stream, _ = acl.rt.create_stream()
            op = Op()
            start.wait()
            for _ in range(rounds):
                desc = _desc(rt, users[i])
                rt.custom_allocators.register(stream, desc)
                assert op.run(stream) == 0
                rt.custom_allocators.unregister(stream)
                rt.custom_allocators.destroy_desc(desc)
            assert acl.rt.synchronize_stream(stream) == 0
            assert list(op.result()) == [0, 2, 4, 6, 8, 10]
            users[i].drain()
            op.close()
            assert acl.rt.destroy_stream(stream) == 0
        except Exception as error:  # reported below
            errors.append(repr(error))

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    for user in users:
        kinds = [c[0] for c in user.calls]
        assert kinds.count("alloc") == kinds.count("free") == rounds
    assert rt.custom_allocators.registered == {} and rt.custom_allocators._descs == {}


def test_a_kernel_with_device_variables_takes_its_workspace_too(rt, stream):
    # a kernel may use device variables (11-11) and take workspace (11-08) at once
    calls = device_variable("custom_alloc_calls", 8)

    def counted(inputs, attrs, outputs, variables):
        variables["custom_alloc_calls"].view(np.int64)[0] += 1
        return inputs[0] * 2

    register_op("CountedWithWorkspace", counted, variables=[calls], workspace=512)
    try:
        user = Caching()
        rt.custom_allocators.register(stream, _desc(rt, user))
        op = Op()
        assert op.run(stream, "CountedWithWorkspace") == 0
        assert user.calls[0] == ("alloc", user, 512)
        assert acl.rt.synchronize_stream(stream) == 0
        assert list(op.result()) == [0, 2, 4, 6, 8, 10]
        user.drain()
        op.close()
        rt.custom_allocators.unregister(stream)
    finally:
        unregister_op("CountedWithWorkspace")
        unregister_variable(calls)
