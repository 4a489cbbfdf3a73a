"""Device variables (hicann/runtime docs/zh/api_ref/11-11_device_variable_memory_operation.md):
declared for Python kernels, loaded on a device when first needed (charged to it), read and
written through their symbol and by the kernels that use them, freed with the device, each
misuse's code, failed calls change nothing."""

import io
import threading

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import (
    MiB,
    Runtime,
    Sanitizer,
    aclrt,
    device_variable,
    register_op,
    unregister_op,
    unregister_variable,
)
from ascend_memsim.observe.stats import MemoryStats
from ascend_memsim.observe.trace import Recorder

INVALID_PARAM = 100000
RT_PARAM_INVALID = 107000
RT_CONTEXT_NULL = 107002
RT_INVALID_SYMBOL = 107043
H2D, D2H, D2D, DEFAULT = 1, 2, 3, 4
HBM = 1


@pytest.fixture
def var():
    variable = device_variable("weights", 24, initial=b"\x01\x02\x03")
    yield variable
    unregister_variable(variable)


@pytest.fixture
def out():
    return io.StringIO()


@pytest.fixture
def rt(out):
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2,
                 sanitizer=Sanitizer(output=out)) as runtime:
        acl.rt.set_device(0)
        yield runtime


def _host(n: int):
    array = np.zeros(n, np.uint8)
    return array, acl.util.numpy_to_ptr(array)


def _read(symbol: int, n: int, offset: int = 0) -> bytes:
    array, ptr = _host(n)
    assert acl.rt.memcpy_from_symbol(ptr, n, symbol, n, offset, D2H) == 0
    return array.tobytes()


def test_a_variable_is_loaded_on_a_device_when_first_needed(rt, var):
    """SymbolTable::GetDeviceAddress loads the binary on first use (Load2Device): the
    variable's memory is the device's from then on, with its initial bytes, zeros after."""
    assert aclrt.aclrtGetSymbolAddress is acl.rt.get_symbol_address
    free_before = acl.rt.get_mem_info(HBM)[0]
    ptr, ret = acl.rt.get_symbol_address(var.symbol)
    assert ret == 0
    block = rt.block(ptr)
    assert block is not None and block.size == 24 and block.module == 7   # RUNTIME
    assert acl.rt.get_mem_info(HBM)[0] == free_before - block.footprint
    assert acl.rt.get_symbol_address(var.symbol) == (ptr, 0)       # loaded once
    assert acl.rt.get_symbol_size(var.symbol) == (24, 0)
    assert _read(var.symbol, 24) == b"\x01\x02\x03" + bytes(21)
    # 11-11: Device变量地址仅在当前Device有效, 切换Device后需重新获取地址
    acl.rt.set_device(1)
    other, _ = acl.rt.get_symbol_address(var.symbol)
    assert other != ptr and rt.block(other).device_id == 1


def test_aclrtfree_of_a_variables_memory_is_refused_and_changes_nothing(rt, var):
    """The runtime loaded the variable for itself: aclrtFree of its address was once taken
    (0), and the next symbol call quietly reloaded the initial bytes over what the program
    had written. DECISION: 107000, the memory and its bytes stay."""
    ptr, _ = acl.rt.get_symbol_address(var.symbol)
    data, src = _host(4)
    data[:] = [9, 9, 9, 9]
    assert acl.rt.memcpy_to_symbol(var.symbol, src, 4, 0, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    free_before = acl.rt.get_mem_info(HBM)[0]
    assert acl.rt.free(ptr) == 107000
    assert "device variable" in acl.get_recent_err_msg()
    assert acl.rt.get_mem_info(HBM)[0] == free_before
    assert acl.rt.get_symbol_address(var.symbol) == (ptr, 0)
    assert _read(var.symbol, 4) == b"\x09\x09\x09\x09"


def test_copies_to_and_from_a_variable_follow_offset_and_count(rt, var):
    """memory.cpp aclrtMemcpyToSymbolImpl: rtMemcpy(symbolAddr + offset, symbolSize - offset,
    src, count, H2D); FromSymbol the other way; ACL_MEMCPY_DEFAULT is taken by both."""
    assert aclrt.aclrtMemcpyToSymbol is acl.rt.memcpy_to_symbol
    assert aclrt.aclrtMemcpyFromSymbol is acl.rt.memcpy_from_symbol
    payload = np.arange(8, dtype=np.uint8) + 100
    assert acl.rt.memcpy_to_symbol(var.symbol, acl.util.numpy_to_ptr(payload), 8, 16,
                                   H2D) == 0
    assert acl.rt.memcpy_to_symbol(var.symbol, acl.util.numpy_to_ptr(payload), 2, 4,
                                   DEFAULT) == 0
    data = _read(var.symbol, 24)
    assert data == b"\x01\x02\x03\x00" + bytes([100, 101]) + bytes(10) + payload.tobytes()
    array, dst = _host(8)
    assert acl.rt.memcpy_from_symbol(dst, 8, var.symbol, 8, 16, DEFAULT) == 0
    assert array.tobytes() == payload.tobytes()


def test_the_async_copies_are_queued_on_the_stream(rt, var):
    assert aclrt.aclrtMemcpyToSymbolAsync is acl.rt.memcpy_to_symbol_async
    assert aclrt.aclrtMemcpyFromSymbolAsync is acl.rt.memcpy_from_symbol_async
    stream, _ = acl.rt.create_stream()
    src, _ = acl.rt.malloc_host(8)
    dst, _ = acl.rt.malloc_host(8)
    assert acl.rt.memcpy(src, 8, acl.util.bytes_to_ptr(b"ABCDEFGH"), 8, 0) == 0
    assert acl.rt.memcpy_to_symbol_async(var.symbol, src, 8, 8, H2D, stream) == 0
    assert acl.rt.memcpy_from_symbol_async(dst, 8, var.symbol, 8, 8, D2H, stream) == 0
    assert _read(var.symbol, 8, 8) == bytes(8)                      # queued, not run
    assert acl.rt.synchronize_stream(stream) == 0
    assert acl.util.ptr_to_bytes(dst, 8) == b"ABCDEFGH"
    acl.rt.free_host(src)
    acl.rt.free_host(dst)
    acl.rt.destroy_stream(stream)


@pytest.mark.parametrize("call, code", [
    # memory.cpp CheckMemcpyFromSymbol / CheckMemcpyToSymbol / GetSymbolInfo
    (lambda s, p: acl.rt.memcpy_from_symbol(p, 8, 0, 8, 0, D2H), INVALID_PARAM),    # NULL
    (lambda s, p: acl.rt.memcpy_from_symbol(0, 8, s, 8, 0, D2H), INVALID_PARAM),
    (lambda s, p: acl.rt.memcpy_from_symbol(p, 4, s, 8, 0, D2H), INVALID_PARAM),    # dstMax
    (lambda s, p: acl.rt.memcpy_from_symbol(p, 8, s, 8, 0, H2D), INVALID_PARAM),    # kind
    (lambda s, p: acl.rt.memcpy_from_symbol(p, 8, s, 8, 0, D2D), INVALID_PARAM),
    (lambda s, p: acl.rt.memcpy_from_symbol(p, 8, s, 8, 17, D2H), INVALID_PARAM),   # 17+8>24
    (lambda s, p: acl.rt.memcpy_from_symbol(p, 8, s, 8, 2**64 - 4, D2H), INVALID_PARAM),
    (lambda s, p: acl.rt.memcpy_to_symbol(0, p, 8, 0, H2D), INVALID_PARAM),
    (lambda s, p: acl.rt.memcpy_to_symbol(s, 0, 8, 0, H2D), INVALID_PARAM),
    (lambda s, p: acl.rt.memcpy_to_symbol(s, p, 8, 0, D2H), INVALID_PARAM),
    (lambda s, p: acl.rt.memcpy_to_symbol(s, p, 25, 0, H2D), INVALID_PARAM),
    (lambda s, p: acl.rt.memcpy_to_symbol_async(s, p, 8, 20, H2D, 0), INVALID_PARAM),
    (lambda s, p: acl.rt.get_symbol_address(0)[1], INVALID_PARAM),
    # SymbolTable::Lookup: RT_ERROR_INVALID_SYMBOL
    (lambda s, p: acl.rt.get_symbol_address(s + 64 * 10**6)[1], RT_INVALID_SYMBOL),
    (lambda s, p: acl.rt.get_symbol_size(12345)[1], RT_INVALID_SYMBOL),
    (lambda s, p: acl.rt.memcpy_to_symbol(12345, p, 8, 0, H2D), RT_INVALID_SYMBOL),
    # the copy is aclrtMemcpy's: a source that is no memory of the process
    (lambda s, p: acl.rt.memcpy_to_symbol(s, 0x1234, 8, 0, H2D), RT_PARAM_INVALID),
    (lambda s, p: acl.rt.memcpy_from_symbol(0x1234, 8, s, 8, 0, D2H), RT_PARAM_INVALID),
    (lambda s, p: acl.rt.memcpy_to_symbol_async(s, p, 8, 0, H2D, 0x1234_5678), 107017),
])
def test_each_misuse_returns_its_code_and_changes_nothing(rt, var, call, code):
    """A failed call changes nothing: the variable, never loaded before, is not loaded
    after it either (memory the call loaded is given back, and the component's peak with
    it: the face fuzz found the RUNTIME peak left at the variable's footprint)."""
    _array, ptr = _host(8)   # the array holds the host memory at ptr
    figures = acl.rt.get_mem_info(HBM)
    blocks = len(rt.blocks())
    usage = rt.device(0).usage()
    assert call(var.symbol, ptr) == code
    assert acl.rt.get_mem_info(HBM) == figures and len(rt.blocks()) == blocks
    assert rt.device(0).usage() == usage
    assert rt.streams.pending == 0


def test_a_count_of_0_succeeds_before_any_check(rt, var):
    """memory.cpp: count == 0 returns ACL_SUCCESS first, a NULL symbol included."""
    assert acl.rt.memcpy_from_symbol(0, 0, 0, 0, 0, 9) == 0
    assert acl.rt.memcpy_to_symbol(0, 0, 0, 0, 9) == 0
    assert acl.rt.memcpy_to_symbol_async(0, 0, 0, 0, 9, 0) == 0


def test_no_current_device_is_context_null(var):
    """ApiImpl::SymbolLookup: CHECK_CONTEXT_VALID -> RT_ERROR_CONTEXT_NULL."""
    with Runtime("A2", hbm_bytes=64 * MiB):
        assert acl.rt.get_symbol_address(var.symbol) == (0, RT_CONTEXT_NULL)
        assert acl.rt.get_symbol_size(var.symbol) == (0, RT_CONTEXT_NULL)


def test_an_unregistered_variable_is_an_unknown_symbol(rt):
    variable = device_variable("gone", 8)
    unregister_variable(variable)
    assert acl.rt.get_symbol_address(variable.symbol) == (0, RT_INVALID_SYMBOL)


def test_a_kernel_reads_and_writes_its_variables(rt, var):
    """A kernel registered with a device variable gets it as a writable uint8 array; what it
    writes is the device's variable after the stream runs, read back through the symbol."""
    counter = device_variable("calls", 8)

    def count(inputs, attrs, outputs, variables):
        calls = variables["calls"].view(np.int64)
        calls[0] += 1
        scale = variables["weights"][0]
        return (inputs[0] * scale).astype(np.float32)

    register_op("CountedScale", count, variables=[counter, var])
    try:
        x = np.arange(6, dtype=np.float32)
        desc = acl.create_tensor_desc(acl.ACL_FLOAT, [6], acl.ACL_FORMAT_ND)
        src, _ = acl.rt.malloc(24, 0)
        dst, _ = acl.rt.malloc(24, 0)
        assert acl.rt.memcpy(src, 24, acl.util.numpy_to_ptr(x), 24, H2D) == 0
        bin_, bout = acl.create_data_buffer(src, 24), acl.create_data_buffer(dst, 24)
        stream, _ = acl.rt.create_stream()
        for _ in range(3):
            assert acl.op.execute_v2("CountedScale", [desc], [bin_], [desc], [bout], 0,
                                     stream) == 0
        assert int.from_bytes(_read(counter.symbol, 8), "little") == 0   # queued
        assert acl.rt.synchronize_stream(stream) == 0
        assert int.from_bytes(_read(counter.symbol, 8), "little") == 3
        y = np.zeros(6, np.float32)
        assert acl.rt.memcpy(acl.util.numpy_to_ptr(y), 24, dst, 24, D2H) == 0
        assert (y == x).all()                                          # weights[0] is 1
        one = np.array([5], np.uint8)
        assert acl.rt.memcpy_to_symbol(var.symbol, acl.util.numpy_to_ptr(one), 1, 0, H2D) == 0
        assert acl.op.execute_v2("CountedScale", [desc], [bin_], [desc], [bout], 0,
                                 stream) == 0
        assert acl.rt.synchronize_stream(stream) == 0
        assert acl.rt.memcpy(acl.util.numpy_to_ptr(y), 24, dst, 24, D2H) == 0
        assert (y == 5 * x).all()
        assert int.from_bytes(_read(counter.symbol, 8), "little") == 4
        for handle in (bin_, bout):
            acl.destroy_data_buffer(handle)
        acl.destroy_tensor_desc(desc)
        acl.rt.destroy_stream(stream)
        acl.rt.free(src)
        acl.rt.free(dst)
    finally:
        unregister_op("CountedScale")
        unregister_variable(counter)


def test_a_failed_launch_does_not_load_the_kernels_variables(rt, var):
    register_op("UsesWeights", lambda i, a, o, v: i[0], variables=[var])
    try:
        desc = acl.create_tensor_desc(acl.ACL_FLOAT, [4], acl.ACL_FORMAT_ND)
        buf = acl.create_data_buffer(0x1234_0000, 16)      # no memory there
        figures = acl.rt.get_mem_info(HBM)
        assert acl.op.execute_v2("UsesWeights", [desc], [buf], [desc], [buf], 0, 0) != 0
        assert acl.rt.get_mem_info(HBM) == figures
        acl.destroy_data_buffer(buf)
        acl.destroy_tensor_desc(desc)
    finally:
        unregister_op("UsesWeights")


def test_register_op_refuses_what_is_not_a_variable():
    with pytest.raises(TypeError):
        register_op("Bad", lambda *a: None, variables=["weights"])
    twice = device_variable("x", 4)
    with pytest.raises(ValueError):
        register_op("Bad", lambda *a: None, variables=[twice, device_variable("x", 4)])
    with pytest.raises(ValueError):
        device_variable("y", 2, initial=b"abc")
    with pytest.raises(ValueError):
        device_variable("z", 0)


def test_a_reset_frees_the_variables_and_reloads_them_fresh(rt, var, out):
    """DECISION: a variable's memory goes with its device (the last aclrtResetDevice), no
    leak; used again, it is loaded again with its initial bytes."""
    stats = MemoryStats.attach(rt)
    with Recorder(rt) as recorder:
        assert acl.rt.get_symbol_address(var.symbol)[1] == 0
        payload = np.full(4, 9, np.uint8)
        assert acl.rt.memcpy_to_symbol(var.symbol, acl.util.numpy_to_ptr(payload), 4, 0,
                                       H2D) == 0
        total = acl.rt.get_mem_info(HBM)[1]
        assert acl.rt.reset_device(0) == 0
        acl.rt.set_device(0)
        assert acl.rt.get_mem_info(HBM)[0] == total
        assert _read(var.symbol, 4) == b"\x01\x02\x03\x00"
    assert "leak" not in out.getvalue()
    names = [e["event"] for e in recorder.trace.events]
    assert names.count("symbol_load") == 2 and names.count("symbol_unload") == 1
    assert names.count("symbol_copy") == 2
    snap = stats.snapshot(0)
    assert (snap["num_symbol_loads"], snap["num_symbol_unloads"], snap["num_symbol_copies"]) \
        == (2, 1, 2)
    assert snap["allocation.component.RUNTIME.current"] == 1


def test_finalize_frees_the_variables_without_a_leak_report(var):
    out = io.StringIO()
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=out)):
        acl.rt.set_device(0)
        assert acl.rt.get_symbol_address(var.symbol)[1] == 0
    assert "leak" not in out.getvalue()


def test_threads_that_need_a_variable_at_once_load_it_once(rt, var):
    """SymbolTable's lock: many threads asking for a variable on one device get one copy."""
    got, errors = [], []

    def ask():
        try:
            acl.rt.set_device(0)
            got.append(acl.rt.get_symbol_address(var.symbol))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(got)) == 1 and got[0][1] == 0
    assert sum(1 for b in rt.blocks() if b.module == 7) == 1
