"""Events, create_stream_with_config, host callbacks and acl.util threads."""

import threading

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer

NOT_READY, COMPLETE = acl.ACL_EVENT_RECORDED_STATUS_NOT_READY, \
    acl.ACL_EVENT_RECORDED_STATUS_COMPLETE


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        runtime.set_device(0)
        yield runtime


def test_event_enum_polarity():
    assert (NOT_READY, COMPLETE) == (0, 1)
    assert (acl.ACL_EVENT_STATUS_COMPLETE, acl.ACL_EVENT_STATUS_NOT_READY) == (0, 1)
    assert acl.ACL_CALLBACK_BLOCK == 1 and acl.ACL_STREAM_FAST_LAUNCH == 1


def test_record_completes_when_the_stream_runs(rt):
    stream, _ = acl.rt.create_stream()
    event, ret = acl.rt.create_event()
    assert ret == 0
    assert acl.rt.query_event_status(event) == (COMPLETE, 0)     # never recorded
    assert acl.rt.record_event(event, stream) == 0
    assert acl.rt.query_event_status(event) == (NOT_READY, 0)
    assert acl.rt.query_event(event) == (acl.ACL_EVENT_STATUS_NOT_READY, 0)
    assert acl.rt.event_elapsed_time(event, event) == (0.0, 507006)
    assert acl.rt.synchronize_event(event) == 0
    assert acl.rt.query_event_status(event) == (COMPLETE, 0)
    assert acl.rt.destroy_event(event) == 0
    assert acl.rt.query_event_status(event) == (0, 107017)
    assert acl.rt.destroy_event(event) == 107017
    acl.rt.destroy_stream(stream)


def test_elapsed_time_between_two_records(rt):
    start, _ = acl.rt.create_event()
    end, _ = acl.rt.create_event()
    acl.rt.record_event(start, 0)
    dev = rt.malloc(1 << 20)
    acl.rt.memset_async(dev, 1 << 20, 1, 1 << 20, 0)
    acl.rt.record_event(end, 0)
    assert acl.rt.synchronize_stream(0) == 0
    ms, ret = acl.rt.event_elapsed_time(start, end)
    assert ret == 0 and ms >= 0.0
    stamp, ret = acl.rt.event_get_timestamp(end)
    assert ret == 0 and stamp > 0
    for e in (start, end):
        acl.rt.destroy_event(e)
    rt.free(dev)


def test_stream_wait_event_orders_two_streams(rt):
    s1, _ = acl.rt.create_stream()
    s2, _ = acl.rt.create_stream()
    dev = rt.malloc(64)
    host = np.zeros(64, np.uint8)
    event, _ = acl.rt.create_event()
    acl.rt.memset_async(dev, 64, 9, 64, s1)
    acl.rt.record_event(event, s1)
    assert acl.rt.stream_wait_event(s2, event) == 0
    acl.rt.memcpy_async(acl.util.numpy_to_ptr(host), 64, dev, 64, 2, s2)
    # synchronising s2 alone runs s1's work first, through the wait
    assert acl.rt.synchronize_stream(s2) == 0
    assert (host == 9).all()
    assert acl.rt.query_event_status(event) == (COMPLETE, 0)
    acl.rt.destroy_event(event)
    rt.free(dev)
    acl.rt.destroy_stream(s1)
    acl.rt.destroy_stream(s2)


def test_bad_event_arguments(rt):
    assert acl.rt.create_event_with_flag(0x4) == (0, 100000)
    event, ret = acl.rt.create_event_with_flag(acl.ACL_EVENT_SYNC | acl.ACL_EVENT_TIME_LINE)
    assert ret == 0
    assert acl.rt.record_event(event, 0xDEAD) == 107017
    assert acl.rt.query_event_status(event) == (COMPLETE, 0)   # the failed record changed nothing
    assert acl.rt.record_event(1.5, 0) == 100000
    acl.rt.destroy_event(event)


def test_create_stream_with_config(rt):
    stream, ret = acl.rt.create_stream_with_config(0, acl.ACL_STREAM_FAST_LAUNCH)
    assert ret == 0 and stream != 0
    assert acl.rt.create_stream_with_config(8, 0) == (0, 100000)
    assert acl.rt.create_stream_with_config(0, 0x40) == (0, 100000)
    acl.rt.destroy_stream(stream)


def test_callbacks_run_on_the_subscribed_thread(rt):
    # The resnet50 async sample's shape: a processing thread, subscribe, launch, sync.
    context, _ = acl.rt.create_context(0)
    stream, _ = acl.rt.create_stream()
    running = {"on": True}
    seen = []

    def process(args):
        ctx, timeout = args
        acl.rt.set_context(ctx)
        while running["on"]:
            acl.rt.process_report(timeout)

    tid, ret = acl.util.start_thread(process, [context, 20])
    assert ret == 0
    assert acl.rt.subscribe_report(tid, stream) == 0
    assert acl.rt.subscribe_report(tid, stream) == 100033
    for i in range(3):
        assert acl.rt.launch_callback(
            lambda data: seen.append((data, threading.get_ident())), i, 1, stream) == 0
    assert seen == []
    assert acl.rt.synchronize_stream(stream) == 0
    assert [d for d, _ in seen] == [0, 1, 2]
    assert {t for _, t in seen} == {tid}
    assert acl.rt.unsubscribe_report(tid, stream) == 0
    assert acl.rt.unsubscribe_report(tid, stream) == 100034
    running["on"] = False
    assert acl.util.stop_thread(tid) == 0
    acl.rt.destroy_stream(stream)
    acl.rt.destroy_context(context)


def test_callback_errors(rt):
    stream, _ = acl.rt.create_stream()
    assert acl.rt.launch_callback(print, None, 0, stream) == 107015      # not subscribed
    assert acl.rt.process_report(10) == 100035                            # nothing subscribed
    me = threading.get_ident()
    assert acl.rt.subscribe_report(me, stream) == 0
    assert acl.rt.process_report(10) == 100036                            # nothing arrived
    assert acl.rt.launch_callback("no", None, 0, stream) == 100000
    assert acl.rt.launch_callback(print, None, 2, stream) == 100000
    got = []
    # a blocking callback whose subscriber is the synchronising thread runs inline
    assert acl.rt.launch_callback(got.append, "x", 1, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert got == ["x"]
    # a non-blocking one waits for process_report
    assert acl.rt.launch_callback(got.append, "y", 0, stream) == 0
    acl.rt.unsubscribe_report(me, stream)
    acl.rt.destroy_stream(stream)


def test_stop_thread_raises_when_the_function_raised(rt):
    def bad(_):
        raise ValueError("inside")

    tid, ret = acl.util.start_thread(bad, 1)
    assert ret == 0
    with pytest.raises(RuntimeError, match="inside"):
        acl.util.stop_thread(tid)
    assert acl.util.stop_thread(tid) == 100000
    called = []
    tid, _ = acl.util.start_thread(lambda: called.append(1), None)
    assert acl.util.stop_thread(tid) == 0 and called == [1]


def _run_isolated(code: str) -> str:
    """Run ``code`` in a fresh interpreter with a deadline, so a hang fails this test
    instead of stopping the suite; its stdout."""
    import subprocess
    import sys
    import textwrap

    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_blocking_callback_of_an_ordinary_thread_that_ended_runs_instead_of_hanging():
    """Issue 16 (12): the subscriber was a threading.Thread that returned; the callback was
    handed to it for ever and synchronize_stream (or acl.finalize) never returned."""
    out = _run_isolated("""
        import threading
        from ascend_memsim import install_acl
        install_acl()
        import acl

        acl.init(); acl.rt.set_device(0)
        for finish in ("synchronize", "finalize"):
            stream, _ = acl.rt.create_stream()
            codes = []
            worker = threading.Thread(
                target=lambda: codes.append(acl.rt.subscribe_report(threading.get_ident(),
                                                                    stream)))
            worker.start(); worker.join()
            got = []
            codes.append(acl.rt.launch_callback(got.append, finish, 1, stream))
            if finish == "synchronize":
                codes.append(acl.rt.synchronize_stream(stream))
                acl.rt.destroy_stream(stream)
            else:
                acl.rt.reset_device(0)
                codes.append(acl.finalize())
            print(finish, codes, got)
    """)
    assert out.splitlines() == ["synchronize [0, 0, 0] ['synchronize']",
                                "finalize [0, 0, 0] ['finalize']"]


def test_subscribing_a_thread_id_that_names_no_live_thread_is_refused(rt):
    stream, _ = acl.rt.create_stream()
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    for tid in (2**63 - 1, ended.ident):
        assert acl.rt.subscribe_report(tid, stream) == 100000
        assert acl.rt.subscribe_report(tid, 0) == 100000
    assert "no live thread" in acl.get_recent_err_msg()
    assert acl.rt.launch_callback(print, None, 1, stream) == 107015      # nothing subscribed
    assert acl.rt.subscribe_report(threading.get_ident(), stream) == 0   # a live one is fine
    acl.rt.unsubscribe_report(threading.get_ident(), stream)
    acl.rt.destroy_stream(stream)


def test_a_record_completes_when_its_stream_reaches_it_not_at_the_synchronisation(rt):
    # A real program times host work with two records on an idle stream (record; sleep;
    # record; synchronize): the device reaches each record when it is queued, so the
    # elapsed time covers the sleep. Records timed only when the lazy queue ran (at the
    # synchronisation) were microseconds apart.
    import time
    stream, _ = acl.rt.create_stream()
    first, _ = acl.rt.create_event()
    second, _ = acl.rt.create_event()
    assert acl.rt.record_event(first, stream) == 0
    time.sleep(0.05)
    assert acl.rt.record_event(second, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    ms, ret = acl.rt.event_elapsed_time(first, second)
    assert ret == 0 and ms >= 50.0
    # work between two records that runs at the synchronisation still counts: a blocking
    # callback run by the synchronising thread (no subscriber: 107015 refuses, so subscribe
    # this thread) holds the stream
    assert acl.rt.subscribe_report(threading.get_ident(), stream) == 0
    assert acl.rt.record_event(first, stream) == 0
    assert acl.rt.launch_callback(lambda _: time.sleep(0.05), None, 1, stream) == 0
    assert acl.rt.record_event(second, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    ms, ret = acl.rt.event_elapsed_time(first, second)
    assert ret == 0 and ms >= 50.0
    assert acl.rt.unsubscribe_report(threading.get_ident(), stream) == 0
    for e in (first, second):
        acl.rt.destroy_event(e)
    acl.rt.destroy_stream(stream)
