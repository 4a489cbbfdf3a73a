"""Streams: queued async work runs at synchronisation, in order; handles are checked."""

import threading

import numpy as np
import pytest

from ascend_memsim import InvalidHandle, InvalidPointer, MallocPolicy, MiB, Runtime, acl
from ascend_memsim.memory.constants import ErrorCode

H2D, D2H, D2D = 1, 2, 3


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"mode": "report", "output": None}) as r:
        r.set_device(0)
        yield r


def read(rt, ptr, count):
    out = bytearray(count)
    rt.memcpy(rt.host.register(out).ptr, count, ptr, count, D2H)
    return bytes(out)


def test_async_work_waits_for_synchronisation(rt):
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    rt.memset(dev, 64, 1, 64)
    rt.memset_async(dev, 64, 9, 64, stream)
    assert read(rt, dev, 4) == b"\x01" * 4
    rt.streams.synchronize_stream(stream)
    assert read(rt, dev, 4) == b"\x09" * 4


def test_stream_order_is_kept(rt):
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    host = rt.malloc_host(64)
    dev = rt.malloc(64)
    out = bytes(64)  # a fresh bytes object, written in place (pyacl takes bytes only)
    out_ptr = acl.util.bytes_to_ptr(out)
    assert acl.rt.memset_async(host, 64, 7, 64, stream) == 0
    assert acl.rt.memcpy_async(dev, 64, host, 64, H2D, stream) == 0
    assert acl.rt.memset_async(host, 64, 1, 32, stream) == 0
    assert acl.rt.memcpy_async(out_ptr, 64, dev, 64, D2H, stream) == 0
    assert out == bytes(64)
    assert acl.rt.synchronize_stream(stream) == 0
    assert out == b"\x07" * 64
    assert acl.util.ptr_to_bytes(host, 64) == b"\x01" * 32 + b"\x07" * 32
    assert rt.sanitizer.reports == []


def test_default_stream_is_0_or_none(rt):
    dev = rt.malloc(64)
    rt.memset_async(dev, 64, 4, 64, 0)
    rt.memset_async(dev, 64, 5, 8, None)
    assert acl.rt.synchronize_stream(0) == 0
    assert read(rt, dev, 9) == b"\x05" * 8 + b"\x04"


def test_synchronize_device_runs_every_stream_in_submission_order(rt):
    s1 = rt.streams.create_stream()
    s2 = rt.streams.create_stream()
    dev = rt.malloc(64)
    rt.memset_async(dev, 64, 1, 64, s1)
    rt.memset_async(dev, 64, 2, 32, s2)
    rt.memset_async(dev, 64, 3, 16, s1)
    assert acl.rt.synchronize_device() == 0
    assert read(rt, dev, 64) == b"\x03" * 16 + b"\x02" * 16 + b"\x01" * 32


def test_invalid_and_destroyed_streams(rt):
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_stream(stream) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.synchronize_stream(stream) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.memset_async(dev, 64, 1, 64, stream) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.memcpy_async(dev, 64, dev + 8, 8, D2D, 0x1234) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.synchronize_stream("s") == ErrorCode.INVALID_PARAM
    assert acl.rt.destroy_stream(0) == ErrorCode.RT_INVALID_HANDLE
    assert rt.streams.pending == 0


def test_bad_async_calls_queue_nothing(rt):
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    assert acl.rt.memcpy_async(dev, 8, dev + 8, 16, D2D, stream) == ErrorCode.RT_PARAM_INVALID
    assert acl.rt.memcpy_async(dev, 64, 77, 16, D2D, stream) == ErrorCode.RT_PARAM_INVALID
    assert acl.rt.memcpy_async(dev, 64, dev, 16, 6, stream) == ErrorCode.INVALID_PARAM
    assert acl.rt.memset_async(dev, 64, 1, 4096, stream) == ErrorCode.RT_PARAM_INVALID
    assert acl.rt.memset_async(dev, 64, 1, 0, stream) == 0
    # count 0 succeeds before any other check, even of the stream (memory.cpp, newer).
    assert acl.rt.memcpy_async(0, 0, 0, 0, 1, 0x999) == 0
    assert rt.streams.pending == 0


def test_destroy_stream_runs_its_work_first(rt):
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    rt.memset_async(dev, 64, 6, 64, stream)
    rt.streams.destroy_stream(stream)
    assert read(rt, dev, 2) == b"\x06\x06"


def test_destroy_stream_whose_work_fails_returns_the_error_and_destroys_it(rt):
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    dev = rt.malloc(64)
    assert acl.rt.memset_async(dev, 64, 6, 64, stream) == 0
    rt.free(dev)  # the queued memset now targets freed memory
    assert acl.rt.destroy_stream(stream) == ErrorCode.RT_PARAM_INVALID
    # the stream is gone: neither usable nor destroyable again
    assert acl.rt.synchronize_stream(stream) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.destroy_stream(stream) == ErrorCode.RT_INVALID_HANDLE


def test_free_releases_at_once_and_the_queued_work_fails_later(rt):
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    rt.memset_async(dev, 64, 6, 64, stream)
    rt.free(dev)
    assert rt.block(dev) is None
    with pytest.raises(InvalidPointer):
        rt.streams.synchronize_stream(stream)
    kinds = [r.kind for r in rt.sanitizer.reports]
    assert kinds == ["free-with-pending-work", "use-after-free"]
    assert "aclrtMemsetAsync" in rt.sanitizer.reports[0].where
    assert rt.sanitizer.reports[1].call == "aclrtMemsetAsync"
    queued = rt.sanitizer.reports[1].queued_site
    assert queued[-1].name == "test_free_releases_at_once_and_the_queued_work_fails_later"
    assert queued[-1].lineno != rt.sanitizer.reports[1].call_site[-1].lineno


def test_failed_work_surfaces_as_the_code_of_synchronize(rt):
    stream, _ = acl.rt.create_stream()
    dev, _ = acl.rt.malloc(64, 0)
    assert acl.rt.memset_async(dev, 64, 1, 64, stream) == 0
    assert acl.rt.free(dev) == 0
    assert acl.rt.synchronize_stream(stream) == ErrorCode.RT_PARAM_INVALID
    assert acl.rt.synchronize_stream(stream) == 0


def test_free_with_dev_sync_drains_the_device_first(rt):
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    host = rt.malloc_host(64)
    rt.memset(dev, 64, 8, 64)
    rt.memcpy_async(host, 64, dev, 64, D2H, stream)
    rt.free_with_dev_sync(dev)
    assert acl.util.ptr_to_bytes(host, 64) == b"\x08" * 64
    assert rt.sanitizer.reports == []


def test_reset_device_discards_streams_and_work(rt):
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    rt.memset_async(dev, 64, 1, 64, stream)
    rt.free(dev)
    rt.reset_device(0)
    assert rt.streams.pending == 0
    rt.set_device(0)
    with pytest.raises(InvalidHandle):
        rt.streams.synchronize_stream(stream)


def test_streams_need_a_current_device():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off"):
        assert acl.rt.create_stream() == (0, ErrorCode.RT_CONTEXT_NULL)
        assert acl.rt.synchronize_device() == ErrorCode.RT_CONTEXT_NULL


def test_async_events_name_their_stream(rt):
    seen = []
    rt.add_observer(lambda event, device, info: seen.append((event, info)))
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    rt.memset_async(dev, 64, 2, 64, stream)
    assert not [e for e, _ in seen if e == "memset"]
    rt.streams.synchronize_stream(stream)
    assert ("memset", {"ptr": dev, "count": 64, "value": 2, "stream": stream}) in seen


def test_two_threads_synchronising_one_stream_keep_submission_order(rt):
    """A second synchroniser waits for work the first one is still running (no hang: every
    wait has a timeout)."""
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    ran = []
    inside, release = threading.Event(), threading.Event()

    def observer(event, device, info):
        if event == "memset":
            ran.append(info["value"])
            if info["value"] == 1:
                inside.set()
                release.wait(5)

    rt.add_observer(observer)
    rt.memset_async(dev, 64, 1, 64, stream)
    rt.memset_async(dev, 64, 2, 64, stream)
    codes = {}

    def sync(name):
        rt.set_device(0)
        codes[name] = acl.rt.synchronize_stream(stream)

    first = threading.Thread(target=sync, args=("first",), daemon=True)
    first.start()
    assert inside.wait(5)
    rt.memset_async(dev, 64, 3, 64, stream)
    second = threading.Thread(target=sync, args=("second",), daemon=True)
    second.start()
    second.join(0.2)
    release.set()
    first.join(5)
    second.join(5)
    assert not first.is_alive() and not second.is_alive()
    assert codes == {"first": 0, "second": 0}
    assert ran == [1, 2, 3]
    assert read(rt, dev, 1) == b"\x03"


def test_destroy_context_runs_the_queued_work_of_its_streams(rt):
    context, _ = acl.rt.create_context(0)
    stream, _ = acl.rt.create_stream()
    dev = rt.malloc(64)
    host = rt.malloc_host(64)
    rt.memset(host, 64, 5, 64)
    assert acl.rt.memcpy_async(dev, 64, host, 64, 1, stream) == 0
    assert acl.rt.destroy_context(context) == 0
    assert rt.streams.pending == 0
    assert read(rt, dev, 4) == b"\x05" * 4
    assert acl.rt.synchronize_stream(stream) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.destroy_context(context) == ErrorCode.RT_INVALID_HANDLE


def test_stream_handles_are_checked_as_ints_first(rt):
    dev = rt.malloc(64)
    for bad in (np.array([1, 2]), np.array([]), np.zeros(3), False, 0.0, "0"):
        assert acl.rt.destroy_stream(bad) == ErrorCode.INVALID_PARAM
        assert acl.rt.memset_async(dev, 64, 1, 64, bad) == ErrorCode.INVALID_PARAM
    assert rt.streams.pending == 0
    assert acl.rt.memset_async(dev, 64, 6, 64, np.int64(0)) == 0
    assert acl.rt.synchronize_stream(None) == 0
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memset_async(dev, 64, 7, 8, np.uint64(stream)) == 0
    assert acl.rt.synchronize_stream(np.int64(stream)) == 0
    assert acl.rt.destroy_stream(np.int64(0)) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.destroy_stream(np.int64(stream)) == 0
    assert read(rt, dev, 9) == b"\x07" * 8 + b"\x06"


def test_queuing_on_a_stream_of_another_device_is_stream_context():
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2, sanitizer="off") as rt:
        rt.set_device(0)
        stream0 = rt.streams.create_stream()
        dev0 = rt.malloc(64)
        rt.set_device(1)
        dev1 = rt.malloc(64)
        assert acl.rt.memset_async(dev1, 64, 1, 64, stream0) == ErrorCode.RT_STREAM_CONTEXT
        assert acl.rt.memset_async(dev0, 64, 1, 64, stream0) == ErrorCode.RT_STREAM_CONTEXT
        assert "device 0" in acl.get_recent_err_msg()
        assert rt.streams.pending == 0
        assert acl.rt.memset_async(dev1, 64, 1, 64, 0) == 0
        assert acl.rt.synchronize_device() == 0
        assert acl.rt.synchronize_stream(stream0) == 0


def test_memcpy_async_between_devices_without_p2p_is_refused_at_enqueue():
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2, sanitizer="off") as rt:
        rt.set_device(1)
        plain1 = rt.malloc(64, MallocPolicy.NORMAL_ONLY)
        p2p1 = rt.malloc(64, MallocPolicy.NORMAL_ONLY_P2P)
        rt.set_device(0)
        plain0 = rt.malloc(64, MallocPolicy.NORMAL_ONLY)
        p2p0 = rt.malloc(64, MallocPolicy.NORMAL_ONLY_P2P)
        sync_code = acl.rt.memcpy(plain1, 64, plain0, 64, 3)
        assert sync_code == ErrorCode.RT_PARAM_INVALID
        for dst, src in ((plain1, plain0), (p2p1, plain0), (plain1, p2p0)):
            assert acl.rt.memcpy_async(dst, 64, src, 64, 3, 0) == sync_code
            assert "P2P" in acl.get_recent_err_msg()
        assert rt.streams.pending == 0
        assert acl.rt.memcpy_async(p2p1, 64, p2p0, 64, 3, 0) == 0
        assert acl.rt.synchronize_stream(0) == 0


def test_work_after_a_failed_operation_still_runs(rt):
    stream, _ = acl.rt.create_stream()
    doomed, _ = acl.rt.malloc(64, 0)
    kept, _ = acl.rt.malloc(64, 0)
    assert acl.rt.memset_async(doomed, 64, 1, 64, stream) == 0
    assert acl.rt.memset_async(kept, 64, 2, 32, stream) == 0
    assert acl.rt.memset_async(kept + 32, 32, 3, 32, stream) == 0
    assert acl.rt.free(doomed) == 0
    # the first failure is the code; the work queued after it ran all the same
    assert acl.rt.synchronize_stream(stream) == ErrorCode.RT_PARAM_INVALID
    assert read(rt, kept, 64) == b"\2" * 32 + b"\3" * 32
    assert rt.streams.pending == 0
    acl.rt.free(kept)


def _submit_during_drain(rt, destroy, stream, dev):
    """Run ``destroy`` while, from inside the drain of its first operation, another thread
    queues a memset of 9 on ``stream``; (code of that submission, code of the destroy)."""
    codes = {}

    def submit():
        rt.set_device(0)
        codes["late"] = acl.rt.memset_async(dev, 64, 9, 64, stream)

    def observer(event, device, info):
        if event == "memset" and info["value"] == 1 and "late" not in codes:
            late = threading.Thread(target=submit, daemon=True)
            late.start()
            late.join(5)

    rt.add_observer(observer)
    rt.memset_async(dev, 64, 1, 64, stream)
    codes["destroy"] = destroy()
    rt.remove_observer(observer)
    return codes


def test_work_submitted_while_destroy_stream_drains_runs_or_is_refused(rt):
    """Issue 9: a memset_async accepted (0) during destroy_stream's drain never ran and left
    the pending count wrong. Now it is refused with 107017 and nothing is left queued."""
    stream = rt.streams.create_stream()
    dev = rt.malloc(64)
    codes = _submit_during_drain(rt, lambda: acl.rt.destroy_stream(stream), stream, dev)
    assert codes == {"late": ErrorCode.RT_INVALID_HANDLE, "destroy": 0}
    assert acl.rt.synchronize_device() == 0
    assert rt.streams.pending == 0
    assert read(rt, dev, 1) == b"\x01"


def test_work_submitted_while_destroy_context_drains_runs_or_is_refused(rt):
    context, _ = acl.rt.create_context(0)
    stream, _ = acl.rt.create_stream()
    dev = rt.malloc(64)
    codes = _submit_during_drain(rt, lambda: acl.rt.destroy_context(context), stream, dev)
    assert codes == {"late": ErrorCode.RT_INVALID_HANDLE, "destroy": 0}
    assert acl.rt.synchronize_device() == 0
    assert rt.streams.pending == 0
    assert read(rt, dev, 1) == b"\x01"


def test_no_stream_is_made_in_a_context_being_destroyed(rt):
    context, _ = acl.rt.create_context(0)
    stream, _ = acl.rt.create_stream()
    dev = rt.malloc(64)
    made = {}

    def observer(event, device, info):
        if event == "memset" and not made:
            made["stream"] = acl.rt.create_stream()

    rt.memset_async(dev, 64, 1, 64, stream)
    rt.add_observer(observer)
    assert acl.rt.destroy_context(context) == 0
    assert made["stream"] == (0, ErrorCode.RT_INVALID_HANDLE)


def test_threads_submitting_while_streams_are_destroyed_lose_no_accepted_work(rt):
    """Every memset_async that returned 0 ran: the count of runs equals the count accepted."""
    rounds, submitters = 20, 3
    ran = []
    rt.add_observer(lambda event, device, info: ran.append(1) if event == "memset" else None)
    dev = rt.malloc(64)
    accepted = [0] * submitters
    for _ in range(rounds):
        stream = rt.streams.create_stream()
        stop = threading.Event()

        def submit(i, stream=stream, stop=stop):
            rt.set_device(0)
            while not stop.is_set():
                if acl.rt.memset_async(dev, 64, 1, 64, stream) == 0:
                    accepted[i] += 1
                else:
                    return

        threads = [threading.Thread(target=submit, args=(i,), daemon=True)
                   for i in range(submitters)]
        for t in threads:
            t.start()
        assert acl.rt.destroy_stream(stream) == 0
        stop.set()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
    assert acl.rt.synchronize_device() == 0
    assert rt.streams.pending == 0
    assert len(ran) == sum(accepted)


def test_reset_device_runs_the_queued_work_before_it_releases():
    """aclrtResetDevice waits for unfinished tasks (vendor api_ref): a device-to-host copy
    queued before the last reset still lands in the host buffer."""
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"mode": "report", "output": None,
                                                      "leaks": False}) as rt:
        rt.set_device(0)
        stream = rt.streams.create_stream()
        dev = rt.malloc(64)
        out = bytearray(64)
        host = rt.host.register(out).ptr
        rt.memset_async(dev, 64, 9, 64, stream)
        rt.memcpy_async(host, 64, dev, 64, D2H, stream)
        rt.reset_device(0)
        assert bytes(out) == b"\x09" * 64
        assert rt.streams.pending == 0


def test_finalize_runs_the_queued_work_of_every_device():
    out = bytearray(8)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"mode": "report", "output": None,
                                                      "leaks": False}) as rt:
        rt.set_device(0)
        dev = rt.malloc(64)
        host = rt.host.register(out).ptr
        rt.memset_async(dev, 64, 3, 8)
        rt.memcpy_async(host, 8, dev, 8, D2H)
    assert bytes(out) == b"\x03" * 8
