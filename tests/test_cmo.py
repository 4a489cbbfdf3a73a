"""The cache operations of hicann/runtime docs/zh/api_ref/11-06_CMO_memory_operation.md beyond
aclrtCmoAsync: barriers (aclrtCmoAsyncWithBarrier / aclrtCmoWaitBarrier) and descriptors
(aclrtCmoGetDescSize / aclrtCmoSetDesc / aclrtCmoAsyncWithDesc). No data effect (the simulator
models no cache); ranges checked as accesses, work queued on streams, each misuse's code,
failed calls change nothing, events counted."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memory_sizes import capacity

from ascend_memsim import MiB, Runtime, acl, aclrt
from ascend_memsim.memory.errors import FeatureNotSupported
from ascend_memsim.observe.stats import MemoryStats
from ascend_memsim.observe.trace import Recorder
from ascend_memsim.runtime.cmo import cache_ops

INVALID_PARAM = 100000
RT_PARAM_INVALID = 107000
RT_STREAM_MODEL = 107005
FEATURE_NOT_SUPPORT = 207000
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2
PREFETCH, WRITEBACK, INVALID, FLUSH = 0, 1, 2, 3


def _barrier(*ids, cmo_type=INVALID):
    return {"barrierNum": len(ids), "cmoInfo": [{"cmoType": cmo_type, "barrierId": i}
                                                for i in ids]}


@pytest.fixture
def rt():
    """A part with the barrier calls (11-06: Atlas 200I/500 A2 only, so a profile that says
    so), 64 MiB, device 0 set."""
    with Runtime("A2", hbm_bytes=64 * MiB, cmo_barrier=True) as runtime:
        acl.rt.set_device(0)
        yield runtime


@pytest.fixture
def streams(rt):
    made = [acl.rt.create_stream()[0] for _ in range(2)]
    yield made
    for s in made:
        acl.rt.destroy_stream(s)


@pytest.fixture
def block(rt):
    ptr, ret = acl.rt.malloc(256, 0)
    assert ret == 0
    assert acl.rt.memset(ptr, 256, 0, 256) == 0
    yield ptr
    acl.rt.free(ptr)


def _read(ptr: int, n: int) -> bytes:
    host, _ = acl.rt.malloc_host(n)
    assert acl.rt.memcpy(host, n, ptr, n, DEVICE_TO_HOST) == 0
    data = acl.util.ptr_to_bytes(host, n)
    acl.rt.free_host(host)
    return data


@pytest.mark.parametrize("product", ["A2", "A3", "950PR", "310P"])
def test_the_barrier_calls_are_not_on_the_built_in_products(product):
    """11-06 产品支持情况: aclrtCmoAsyncWithBarrier / aclrtCmoWaitBarrier 不支持 on every part
    but Atlas 200I/500 A2 (RT_FEATURE_TASK_ASYNC_CMO only in config/mini_v3, as31xm1)."""
    with Runtime(product, **capacity(product, 64 * MiB)):
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(64, 0)
        assert acl.rt.cmo_async_with_barrier(ptr, 64, INVALID, 1, 0) == FEATURE_NOT_SUPPORT
        assert acl.rt.cmo_wait_barrier(_barrier(1), 0, 0) == FEATURE_NOT_SUPPORT
        acl.rt.free(ptr)


def test_a_wait_runs_the_invalid_operation_it_waits_for_and_no_more(rt, streams, block):
    """11-06 aclrtCmoWaitBarrier: "等待具有指定barrierId的Invalid内存操作任务执行完成". The wait
    on stream B runs stream A up to the barrier's operation: A's later work stays queued."""
    assert aclrt.aclrtCmoAsyncWithBarrier is acl.rt.cmo_async_with_barrier
    assert aclrt.aclrtCmoWaitBarrier is acl.rt.cmo_wait_barrier
    a, b = streams
    assert acl.rt.cmo_async_with_barrier(block, 256, INVALID, 7, a) == 0
    assert acl.rt.value_write(block, 5, 0, a) == 0          # after the barrier, on A
    assert acl.rt.cmo_wait_barrier(_barrier(7), b, 0) == 0
    assert acl.rt.value_write(block + 8, 6, 0, b) == 0      # after the wait, on B
    assert rt.streams.pending == 4
    assert acl.rt.synchronize_stream(b) == 0
    assert rt.streams.pending == 1                           # A's value write
    assert _read(block, 16) == bytes(8) + (6).to_bytes(8, "little")
    assert acl.rt.synchronize_stream(a) == 0
    assert _read(block, 8) == (5).to_bytes(8, "little")


def test_a_loop_of_barrier_operations_keeps_no_operation_alive(rt, streams, block):
    """Each barrier id kept every operation queued with it until the device's reset, so a
    loop of cache operations grew without bound (2,000 operations kept here); a wait needs
    only the last one's place in the queue."""
    import gc

    from ascend_memsim.runtime.work import Operation

    a, b = streams
    for _ in range(2000):
        assert acl.rt.cmo_async_with_barrier(block, 256, INVALID, 7, a) == 0
        assert acl.rt.cmo_wait_barrier(_barrier(7), b, 0) == 0
        assert acl.rt.synchronize_stream(b) == 0
    gc.collect()
    assert sum(isinstance(o, Operation) for o in gc.get_objects()) == 0


def test_a_wait_for_a_barrier_never_given_is_refused_at_once(rt, streams, block):
    """Model::GetCmoId: a logic id CmoIdAlloc never saw is RT_ERROR_MODEL_EXIT_ID, which
    errcode_manage.cc makes ACL_ERROR_RT_STREAM_MODEL (107005); the wait is not queued, so it
    can never hang. Ids are known from the call that gives them."""
    a, b = streams
    assert acl.rt.cmo_wait_barrier(_barrier(3), b, 0) == RT_STREAM_MODEL
    assert acl.rt.cmo_async_with_barrier(block, 64, INVALID, 3, a) == 0
    assert acl.rt.cmo_wait_barrier(_barrier(3, 4), b, 0) == RT_STREAM_MODEL
    assert rt.streams.pending == 1
    assert acl.rt.cmo_wait_barrier(_barrier(3), b, 0) == 0
    assert acl.rt.synchronize_device() == 0
    # a wait after the operation ran still finds its id (the model keeps it)
    assert acl.rt.cmo_wait_barrier(_barrier(3), b, 0) == 0
    assert acl.rt.synchronize_device() == 0


def test_a_reset_forgets_the_barrier_ids(rt, block):
    assert acl.rt.cmo_async_with_barrier(block, 64, INVALID, 9, 0) == 0
    assert acl.rt.synchronize_device() == 0
    acl.rt.free(block)
    assert acl.rt.reset_device(0) == 0
    acl.rt.set_device(0)
    assert acl.rt.cmo_wait_barrier(_barrier(9), 0, 0) == RT_STREAM_MODEL


@pytest.mark.parametrize("size, cmo_type, barrier, code", [
    (64, INVALID, 0, RT_PARAM_INVALID),     # INVALID: barrierId 支持传入大于0的数字
    (64, PREFETCH, 1, RT_PARAM_INVALID),    # 当cmoType为其它值时, barrierId固定传0
    (64, FLUSH, 2, RT_PARAM_INVALID),
    (0, INVALID, 1, RT_PARAM_INVALID),      # rtsCmoAsyncWithBarrier: srcLen == 0 (no ACL check)
    (64, 4, 0, FEATURE_NOT_SUPPORT),        # rtsCmoAsyncWithBarrier: default case
    (64, INVALID, 1 << 32, INVALID_PARAM),  # barrierId is a uint32_t
    (1 << 20, INVALID, 1, RT_PARAM_INVALID),  # past the block
])
def test_each_barrier_misuse_returns_its_code_and_queues_nothing(rt, block, size, cmo_type,
                                                                 barrier, code):
    assert acl.rt.cmo_async_with_barrier(block, size, cmo_type, barrier, 0) == code
    assert rt.streams.pending == 0
    if 0 < barrier < 1 << 32:
        assert acl.rt.cmo_wait_barrier(_barrier(barrier), 0, 0) == RT_STREAM_MODEL


def test_a_cmo_type_outside_the_enum_is_named_with_the_enum(rt, block):
    with pytest.raises(FeatureNotSupported, match=r"cmoType 4 is not an aclrtCmoType "
                       r"\(PREFETCH 0, WRITEBACK 1, INVALID 2, FLUSH 3\)"):
        cache_ops(rt).cmo_async_with_barrier(block, 64, 4, 0, 0)


@pytest.mark.parametrize("cmo_type", [PREFETCH, WRITEBACK, FLUSH])
def test_other_types_carry_barrier_id_0(rt, block, cmo_type):
    assert acl.rt.cmo_async_with_barrier(block, 64, cmo_type, 0, 0) == 0
    assert acl.rt.synchronize_device() == 0


@pytest.mark.parametrize("task_info, code", [
    (_barrier(), INVALID_PARAM),                              # barrierNum in (0, 6]
    (_barrier(*range(1, 8)), INVALID_PARAM),
    ({"barrierNum": 2, "cmoInfo": [{"cmoType": 2, "barrierId": 1}]}, INVALID_PARAM),
    (_barrier(1, cmo_type=PREFETCH), RT_PARAM_INVALID),       # 仅支持ACL_RT_CMO_TYPE_INVALID
    (_barrier(0), RT_PARAM_INVALID),                          # rtsLaunchBarrierTask: logicId 0
    ([1, 2], INVALID_PARAM),
    (None, INVALID_PARAM),
])
def test_each_wait_misuse_returns_its_code(rt, block, task_info, code):
    assert acl.rt.cmo_async_with_barrier(block, 64, INVALID, 1, 0) == 0
    pending = rt.streams.pending
    assert acl.rt.cmo_wait_barrier(task_info, 0, 0) == code
    assert rt.streams.pending == pending
    assert acl.rt.synchronize_device() == 0


def test_a_barrier_operation_on_a_freed_block_fails_when_it_runs(rt, streams):
    ptr, _ = acl.rt.malloc(64, 0)
    a, b = streams
    assert acl.rt.cmo_async_with_barrier(ptr, 64, INVALID, 1, a) == 0
    assert acl.rt.free(ptr) == 0
    assert acl.rt.cmo_wait_barrier(_barrier(1), b, 0) == 0
    # the wait ran A's operation, which found the block gone
    assert acl.rt.synchronize_stream(b) == RT_PARAM_INVALID
    assert acl.rt.synchronize_stream(a) == 0


@pytest.mark.parametrize("product, size", [("A2", 32), ("A3", 32), ("950PR", 64)])
def test_the_descriptor_size_is_the_products(product, size):
    """cmoDDRStructInfoSize (src/runtime/config/*/dev_info_reg.cc): sizeof(rtCmoAddrInfo), 32,
    on 910_B_93; sizeof(rtDavidCmoAddrInfo), 64, on 950. No device is needed
    (ApiImpl::GetCmoDescSize reads the chip's properties)."""
    assert aclrt.aclrtCmoGetDescSize is acl.rt.cmo_get_desc_size
    with Runtime(product, **capacity(product, 64 * MiB)):
        assert acl.rt.cmo_get_desc_size() == (size, 0)


def test_the_descriptor_calls_are_not_on_the_310p():
    """11-06: aclrtCmoGetDescSize / SetDesc / AsyncWithDesc 不支持 on Atlas 推理系列产品
    (rtsGetCmoDescSize, rtsSetCmoDesc: RT_FEATURE_TASK_CMO; rtCmoAddrTaskLaunch:
    cmoDDRStructInfoSize 0)."""
    with Runtime("310P", ddr_bytes=64 * MiB):
        acl.rt.set_device(0)
        desc, _ = acl.rt.malloc(64, 0)
        assert acl.rt.cmo_get_desc_size() == (0, FEATURE_NOT_SUPPORT)
        assert acl.rt.cmo_set_desc(desc, desc, 64) == FEATURE_NOT_SUPPORT
        assert acl.rt.cmo_async_with_desc(desc, PREFETCH, 0, 0) == FEATURE_NOT_SUPPORT
        acl.rt.free(desc)


@pytest.mark.parametrize("product, layout, fields", [
    ("A2", "<IIHHIQII", lambda r: (r[5], r[4])),          # rtCmoAddrInfo: src, len_inner
    ("950PR", "<28xHHQIII12x", lambda r: (r[2], r[5])),   # rtDavidCmoAddrInfo
])
def test_set_desc_writes_the_runtimes_record_into_device_memory(product, layout, fields):
    """ApiImpl::SetCmoDesc copies an rtCmoAddrInfo (950: rtDavidCmoAddrInfo) holding src and
    len_inner into the descriptor, host to device."""
    assert aclrt.aclrtCmoSetDesc is acl.rt.cmo_set_desc
    with Runtime(product, hbm_bytes=64 * MiB):
        acl.rt.set_device(0)
        size, _ = acl.rt.cmo_get_desc_size()
        desc, _ = acl.rt.malloc(size, 0)
        target, _ = acl.rt.malloc(4096, 0)
        assert acl.rt.cmo_set_desc(desc, target + 64, 1000) == 0
        record = struct.unpack(layout, _read(desc, size))
        assert fields(record) == (target + 64, 1000)
        acl.rt.free(desc)
        acl.rt.free(target)


def test_a_descriptor_is_read_when_the_stream_runs(rt, streams):
    """11-06 aclrtCmoAsyncWithDesc: 使用内存描述符 (二级指针方式): the device reads the
    descriptor when it runs the operation; the range it names is checked then."""
    assert aclrt.aclrtCmoAsyncWithDesc is acl.rt.cmo_async_with_desc
    a, _ = streams
    desc, _ = acl.rt.malloc(32, 0)
    live, _ = acl.rt.malloc(256, 0)
    dead, _ = acl.rt.malloc(256, 0)
    assert acl.rt.free(dead) == 0
    assert acl.rt.cmo_set_desc(desc, live, 256) == 0
    assert acl.rt.cmo_async_with_desc(desc, PREFETCH, a, 0) == 0
    assert acl.rt.synchronize_stream(a) == 0
    assert acl.rt.cmo_async_with_desc(desc, PREFETCH, a, 0) == 0
    assert acl.rt.cmo_set_desc(desc, dead, 256) == 0       # rewritten before the stream runs
    assert acl.rt.synchronize_stream(a) == RT_PARAM_INVALID
    assert acl.rt.cmo_set_desc(desc, live, 4096) == 0      # past the block
    assert acl.rt.cmo_async_with_desc(desc, PREFETCH, 0, 0) == 0   # the default stream
    assert acl.rt.synchronize_device() == RT_PARAM_INVALID
    acl.rt.free(desc)
    acl.rt.free(live)


def test_each_descriptor_misuse_returns_its_code_and_changes_nothing(rt, block):
    desc, _ = acl.rt.malloc(32, 0)
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.cmo_set_desc(desc, block, 64) == 0
    before = _read(desc, 32)
    # api_error.cc SetCmoDesc: NULL cmoDesc / src, srcLen 0 (the ACL layer checks nothing)
    for args in ((0, block, 64), (desc, 0, 64), (desc, block, 0)):
        assert acl.rt.cmo_set_desc(*args) == RT_PARAM_INVALID
    assert acl.rt.cmo_set_desc(desc, block, 1 << 32) == RT_PARAM_INVALID  # len_inner is a u32
    assert acl.rt.cmo_set_desc(host, block, 64) == RT_PARAM_INVALID       # not device memory
    assert acl.rt.cmo_set_desc(desc + 48, block, 64) == RT_PARAM_INVALID  # past the block
    assert _read(desc, 32) == before
    # rtsLaunchCmoAddrTask: reserve; api_error.cc CmoAddrTaskLaunch: NULL, type outside enum
    assert acl.rt.cmo_async_with_desc(desc, PREFETCH, 0, 8) == RT_PARAM_INVALID
    assert acl.rt.cmo_async_with_desc(0, PREFETCH, 0, 0) == RT_PARAM_INVALID
    assert acl.rt.cmo_async_with_desc(desc, 4, 0, 0) == RT_PARAM_INVALID
    assert acl.rt.cmo_async_with_desc(host, PREFETCH, 0, 0) == RT_PARAM_INVALID
    assert acl.rt.cmo_async_with_desc(desc, PREFETCH, 0x1234_5678, 0) == 107017
    assert rt.streams.pending == 0
    acl.rt.free_host(host)
    acl.rt.free(desc)


def test_every_cache_and_value_call_is_an_event_counted_in_the_statistics(rt, block):
    stats = MemoryStats.attach(rt)
    desc, _ = acl.rt.malloc(32, 0)
    with Recorder(rt) as recorder:
        assert acl.rt.cmo_async(block, 64, PREFETCH, 0) == 0
        assert acl.rt.cmo_async_with_barrier(block, 64, INVALID, 2, 0) == 0
        assert acl.rt.cmo_wait_barrier(_barrier(2), 0, 0) == 0
        assert acl.rt.cmo_set_desc(desc, block, 64) == 0
        assert acl.rt.cmo_async_with_desc(desc, PREFETCH, 0, 0) == 0
        assert acl.rt.value_write(block, 1, 0, 0) == 0
        assert acl.rt.value_wait(block, 1, 1, 0) == 0
        assert acl.rt.cmo_async(block, 0, PREFETCH, 0) == INVALID_PARAM   # no event
        assert acl.rt.synchronize_device() == 0
    events = [e for e in recorder.trace.events if e["event"] not in ("memcpy", "memset")]
    assert [e["event"] for e in events] == ["cmo", "cmo", "cmo_wait_barrier", "cmo_set_desc",
                                            "cmo", "value_write", "value_wait"]
    assert events[1]["barrier_id"] == 2 and events[1]["cmo_type"] == INVALID
    assert events[3] == {**events[3], "desc": desc, "ptr": block, "size": 64}
    snap = stats.snapshot(0)
    assert (snap["num_cmos"], snap["num_cmo_wait_barriers"], snap["num_cmo_set_descs"],
            snap["num_value_writes"], snap["num_value_waits"]) == (3, 1, 1, 1, 1)
    acl.rt.free(desc)


programs = st.lists(st.one_of(
    st.tuples(st.just("barrier"), st.integers(0, 1), st.integers(1, 3)),
    st.tuples(st.just("wait"), st.integers(0, 1),
              st.lists(st.integers(1, 3), min_size=1, max_size=3)),
    st.tuples(st.just("write"), st.integers(0, 1), st.integers(0, 7)),
    st.tuples(st.just("sync"), st.integers(0, 1), st.just(None)),
), max_size=14)


@given(program=programs)
def test_barrier_programs_never_hang_and_waits_need_a_given_id(program):
    """Any order of barrier operations, waits, value writes and synchronisations on two
    streams: a wait succeeds exactly when every id it names was given before on the device
    (else 107005, nothing queued), no synchronisation fails or hangs, and when the device is
    synchronised every value write has landed."""
    with Runtime("A2", hbm_bytes=64 * MiB, cmo_barrier=True) as runtime:
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(64, 0)
        assert acl.rt.memset(ptr, 64, 0, 64) == 0
        streams = [acl.rt.create_stream()[0] for _ in range(2)]
        given_ids, written = set(), {}
        for kind, i, arg in program:
            stream = streams[i]
            if kind == "barrier":
                assert acl.rt.cmo_async_with_barrier(ptr, 64, INVALID, arg, stream) == 0
                given_ids.add(arg)
            elif kind == "wait":
                pending = runtime.streams.pending
                code = acl.rt.cmo_wait_barrier(_barrier(*arg), stream, 0)
                assert code == (0 if set(arg) <= given_ids else RT_STREAM_MODEL)
                assert runtime.streams.pending == pending + (code == 0)
            elif kind == "write":
                assert acl.rt.value_write(ptr + 8 * arg, arg + 1, 0, stream) == 0
                written[arg] = arg + 1
            else:
                assert acl.rt.synchronize_stream(stream) == 0
        assert acl.rt.synchronize_device() == 0
        assert runtime.streams.pending == 0
        words = _read(ptr, 64)
        for slot, value in written.items():
            assert int.from_bytes(words[8 * slot:8 * slot + 8], "little") == value
        for stream in streams:
            acl.rt.destroy_stream(stream)
        acl.rt.free(ptr)
