"""Value write and value wait on a stream (hicann/runtime docs/zh/api_ref/
11-09_stream_memory_operation.md): queued on the stream, the write seen through the data plane
after the stream runs, the wait's four conditions, each misuse's code, failed calls change
nothing."""

import pytest

from ascend_memsim import MiB, Runtime, acl, aclrt

INVALID_PARAM = 100000
RT_PARAM_INVALID = 107000
FEATURE_NOT_SUPPORT = 207000
RT_INTERNAL_ERROR = 507000
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2


@pytest.fixture
def word(rt):
    ptr, ret = acl.rt.malloc(64, 0)
    assert ret == 0
    assert acl.rt.memset(ptr, 64, 0, 64) == 0
    return ptr


def _read(ptr: int) -> int:
    host, ret = acl.rt.malloc_host(8)
    assert ret == 0
    assert acl.rt.memcpy(host, 8, ptr, 8, DEVICE_TO_HOST) == 0
    data = acl.util.ptr_to_bytes(host, 8)
    acl.rt.free_host(host)
    return int.from_bytes(data, "little")


def _write(ptr: int, value: int) -> None:
    data = value.to_bytes(8, "little")
    assert acl.rt.memcpy(ptr, 8, acl.util.bytes_to_ptr(data), 8, HOST_TO_DEVICE) == 0


def test_the_write_is_queued_and_seen_after_the_stream_runs(word, stream):
    """11-09 aclrtValueWrite: "向指定内存中写数据。异步接口" (asynchronous: the word changes when
    the stream runs); aclrt names the C call."""
    assert aclrt.aclrtValueWrite is acl.rt.value_write
    assert acl.rt.value_write(word, 0x1122334455667788, 0, stream) == 0
    assert _read(word) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert _read(word) == 0x1122334455667788


@pytest.mark.parametrize("flag, stored, value", [
    (0, 5, 5), (0, 6, 5), (0, 3, (1 << 64) - 2),   # GEQ: (int64_t)(*devAddr - value) >= 0
    (1, 9, 9),                                      # EQ
    (2, 0b0110, 0b0100),                            # AND: (*devAddr & value) != 0
    (3, 0, 0),                                      # NOR: ~(*devAddr | value) != 0
])
def test_a_wait_whose_condition_holds_lets_the_stream_go_on(word, stream, flag, stored, value):
    """11-09 aclrtValueWait: ACL_STREAM_WAIT_VALUE_GEQ 0, EQ 1, AND 2, NOR 3, each as its
    comment in the document defines it (GEQ compares the signed 64-bit difference)."""
    _write(word, stored)
    assert acl.rt.value_wait(word, value, flag, stream) == 0
    assert acl.rt.value_write(word + 8, 1, 0, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert _read(word + 8) == 1


@pytest.mark.parametrize("flag, stored, value", [
    (0, 4, 5), (1, 8, 9), (2, 0b0011, 0b0100), (3, (1 << 64) - 1, 0)])
def test_a_wait_nothing_can_satisfy_fails_the_synchronisation(word, stream, flag, stored, value):
    """DECISION: a wait no queued work can satisfy would hang the stream on hardware; here the
    synchronising call returns ACL_ERROR_RT_INTERNAL_ERROR instead of hanging."""
    _write(word, stored)
    assert acl.rt.value_wait(word, value, flag, stream) == 0
    assert acl.rt.synchronize_stream(stream) == RT_INTERNAL_ERROR
    assert acl.rt.synchronize_stream(stream) == 0     # the failed wait is gone


def test_a_wait_is_released_by_a_write_queued_on_another_stream(word, stream):
    """The wait on one stream is satisfied by a value write on another stream (the vendor
    sample example/memory/9_multistream_sync_memory), whichever stream is synchronised."""
    other, _ = acl.rt.create_stream()
    assert acl.rt.value_wait(word, 1, 1, stream) == 0
    assert acl.rt.value_write(word + 8, 5, 0, stream) == 0
    assert acl.rt.value_write(word, 1, 0, other) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert (_read(word), _read(word + 8)) == (1, 5)
    assert acl.rt.synchronize_stream(other) == 0


@pytest.mark.parametrize("call, offset, value, flag, code", [
    ("value_write", 4, 1, 0, INVALID_PARAM),        # devAddr要求8字节对齐
    # flag: 预留参数 (reserved), 当前固定设置为0; api_error.cc MemWriteValue: flag != 0 is
    # RT_ERROR_INVALID_VALUE, ACL_ERROR_RT_PARAM_INVALID
    ("value_write", 0, 1, 1, RT_PARAM_INVALID),
    ("value_write", 0, -1, 0, INVALID_PARAM),       # value is a uint64_t
    ("value_write", 0, 1 << 64, 0, INVALID_PARAM),
    # GEQ, EQ, AND, NOR only; api_error.cc MemWaitValue: flag >= MEM_WAIT_VALUE_TYPE_MAX
    ("value_wait", 0, 1, 4, RT_PARAM_INVALID),
    ("value_wait", 0, 1, -1, RT_PARAM_INVALID),
    ("value_wait", 4, 1, 0, INVALID_PARAM),
    ("value_wait", 0, 1.0, 0, INVALID_PARAM),
])
def test_each_misuse_returns_its_code_and_queues_nothing(word, stream, call, offset, value,
                                                          flag, code):
    """A refused call queues nothing: the stream then runs clean and the word is unchanged."""
    assert getattr(acl.rt, call)(word + offset, value, flag, stream) == code
    assert acl.rt.synchronize_stream(stream) == 0
    assert _read(word) == 0


def test_freed_host_and_unknown_addresses_and_streams_are_refused(rt, word, stream):
    """devAddr must be live device memory (Device侧内存地址); the stream must exist. Host
    memory: api_error.cc MemWriteValue / MemWaitValue, location type not DEVICE, 107000."""
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.value_write(host, 1, 0, stream) == RT_PARAM_INVALID
    assert acl.rt.value_wait(host, 1, 0, stream) == RT_PARAM_INVALID
    assert acl.rt.value_write(word, 1, 0, 0x1234_5678) == 107017   # RT_INVALID_HANDLE
    ptr, _ = acl.rt.malloc(64, 0)
    assert acl.rt.free(ptr) == 0
    assert acl.rt.value_write(ptr, 1, 0, stream) == 107000        # RT_PARAM_INVALID
    assert acl.rt.value_wait(ptr, 1, 0, stream) == 107000
    assert acl.rt.synchronize_device() == 0
    assert _read(word) == 0


def test_a_null_address_is_the_acl_layers_invalid_param(word, stream):
    """memory.cpp aclrtValueWriteImpl / aclrtValueWaitImpl: ACL_REQUIRES_NOT_NULL(devAddr)."""
    assert acl.rt.value_write(0, 1, 0, stream) == INVALID_PARAM
    assert acl.rt.value_wait(0, 1, 0, stream) == INVALID_PARAM
    assert acl.rt.synchronize_stream(stream) == 0


def test_value_write_and_wait_are_not_on_the_310p():
    """11-09 产品支持情况: Atlas 推理系列产品 不支持; api_c_memory.cc rtsValueWrite /
    rtsValueWait: no RT_FEATURE_TASK_VALUE_WAIT (config/dc) is 207000."""
    with Runtime("310P", ddr_bytes=64 * MiB):
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(64, 0)
        assert acl.rt.value_write(ptr, 1, 0, 0) == FEATURE_NOT_SUPPORT
        assert acl.rt.value_wait(ptr, 1, 0, 0) == FEATURE_NOT_SUPPORT
        assert acl.rt.cmo_async(ptr, 64, 0, 0) == FEATURE_NOT_SUPPORT
        assert acl.rt.synchronize_device() == 0
        assert acl.rt.free(ptr) == 0


def test_the_default_stream_is_stream_0(word):
    """11-09: "此处支持传NULL (the default stream)"."""
    assert acl.rt.value_write(word, 3, 0, 0) == 0
    assert acl.rt.value_wait(word, 3, 1, 0) == 0
    assert acl.rt.synchronize_device() == 0
    assert _read(word) == 3


def test_a_prefetch_checks_its_range_now_and_when_the_stream_runs(word, stream):
    """11-06 aclrtCmoAsync: 当前仅支持ACL_RT_CMO_TYPE_PREFETCH (0); no data effect in the
    simulator; a block freed before the stream runs fails the synchronisation."""
    assert aclrt.aclrtCmoAsync is acl.rt.cmo_async
    _write(word, 42)
    assert acl.rt.cmo_async(word, 64, 0, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert _read(word) == 42
    ptr, _ = acl.rt.malloc(64, 0)
    assert acl.rt.cmo_async(ptr, 64, 0, stream) == 0
    assert acl.rt.free(ptr) == 0
    assert acl.rt.synchronize_stream(stream) == 107000


@pytest.mark.parametrize("cmo_type", [1, 2, 3])
def test_the_runtime_takes_every_cmo_type(word, stream, cmo_type):
    """api_c_standard_soc.cc rtCmoAsync: "support prefetch, write back, invalid, flush"
    (isSupport covers RT_CMO_PREFETCH..RT_CMO_FLUSH), although 11-06 says only PREFETCH today;
    no data effect."""
    _write(word, 7)
    assert acl.rt.cmo_async(word, 64, cmo_type, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert _read(word) == 7


@pytest.mark.parametrize("addr, size, cmo_type, code", [
    # rtCmoAsync: a cmoType outside the enum is ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    ("word", 64, 4, FEATURE_NOT_SUPPORT), ("word", 64, -1, FEATURE_NOT_SUPPORT),
    # memory.cpp aclrtCmoAsyncImpl checks src and size before the runtime looks at the type
    ("word", 0, 0, INVALID_PARAM), ("word", 0, 1, INVALID_PARAM), ("word", 0, 9, INVALID_PARAM),
    ("null", 64, 0, INVALID_PARAM), ("null", 64, 9, INVALID_PARAM),
    ("word", 1 << 30, 0, RT_PARAM_INVALID),                        # past the block
    ("word", 64, 1 << 31, INVALID_PARAM),                         # not an int32 enum
])
def test_each_cmo_misuse_returns_its_code_and_queues_nothing(word, stream, addr, size,
                                                              cmo_type, code):
    ptr = word if addr == "word" else 0
    assert acl.rt.cmo_async(ptr, size, cmo_type, stream) == code
    assert acl.rt.synchronize_stream(stream) == 0


def test_a_cmo_on_host_memory_is_refused(rt, stream):
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.cmo_async(host, 64, 0, stream) == INVALID_PARAM
