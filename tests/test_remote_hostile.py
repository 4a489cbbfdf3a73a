"""Real worker processes under stress (ascend_memsim.remote): a worker that forks after
connecting, an owner that cannot start a thread or is flooded with idle connections, host
buffers a worker drops, and changed arrays that do not fit in one frame."""

import json
import multiprocessing as mp
import os
import socket
import threading
from multiprocessing import connection as mpc

import numpy as np
import pytest

from ascend_memsim import MiB, Runtime, acl, serve
from ascend_memsim.remote import owner as owner_module
from ascend_memsim.remote import wire
from ascend_memsim.remote import worker as worker_module

WAIT = 60  # seconds; a generous bound, never an expected time
ROUNDS = 300

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="these workers fork (os.fork)")
fork_warning = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")


@pytest.fixture
def owned():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None}) as rt:
        with serve(rt, sanitizer={"output": None}) as owner:
            acl.rt.set_device(0)
            yield rt, owner


def _in_fork(target, *args):
    """Run ``target(pipe, *args)`` in a forked worker process; its one message back."""
    ctx = mp.get_context("fork")
    ours, theirs = ctx.Pipe()
    process = ctx.Process(target=_guarded, args=(target, theirs, *args), daemon=True)
    process.start()
    assert ours.poll(WAIT), "the worker did not answer"
    reply = ours.recv()
    process.join(WAIT)
    assert reply[0] == "ok", reply
    return reply[1]


def _guarded(target, pipe, *args):
    try:
        pipe.send(("ok", target(*args)))
    except BaseException as e:  # sent back for the test to see
        pipe.send(("raised", type(e).__name__, str(e)))


# -- 1. a worker that forks after connect() ---------------------------------------------------

def _churn(rounds):
    """malloc + free + the process's own pid, ``rounds`` times: the replies that are wrong."""
    wrong = 0
    pid = acl.rt.device_get_bare_tgid()[0]
    for _ in range(rounds):
        try:
            out = acl.rt.malloc(4096, 0)
            good = (type(out) is tuple and len(out) == 2 and out[1] == 0
                    and type(out[0]) is int and out[0] > 0)
            good = good and acl.rt.free(out[0]) == 0
            good = good and acl.rt.device_get_bare_tgid() == (pid, 0)
        except Exception:
            good = False
        wrong += not good
    return pid, wrong


def _fork_and_churn(rounds):
    import ascend_memsim

    ascend_memsim.connect()
    assert acl.rt.set_device(0) == 0
    before = acl.rt.device_get_bare_tgid()[0]
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the worker's own child (a DataLoader worker, say)
        try:
            os.close(read)
            out = {"set_device": acl.rt.set_device(0)}
            out["pid"], out["wrong"] = _churn(rounds)
            os.write(write, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write)
    pid, wrong = _churn(rounds)
    with os.fdopen(read, "rb") as f:
        theirs = json.loads(f.read() or b"{}")
    os.waitpid(child, 0)
    return {"before": before, "pid": pid, "wrong": wrong, "child": theirs}


@needs_fork
@fork_warning
def test_a_worker_that_forks_gets_only_its_own_replies_and_its_child_is_its_own_process(
        owned):
    _, owner = owned
    out = _in_fork(_fork_and_churn, ROUNDS)
    child = out["child"]
    assert out["pid"] == out["before"] and out["wrong"] == 0
    # DECISION: the child connects anew, as a simulated process of its own
    assert child == {"set_device": 0, "pid": child["pid"], "wrong": 0}
    assert child["pid"] != out["pid"]
    for pid in (out["pid"], child["pid"]):
        assert owner.wait_ended(pid, WAIT)
        assert owner.ended[pid] == []  # every block freed, none leaked


def _fork_after_the_owner_is_gone(go, back):
    import ascend_memsim

    ascend_memsim.connect()
    assert acl.rt.get_device_count() == (1, 0)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            back.recv()  # the owner has closed
            errors = []
            for _ in range(2):
                try:
                    acl.rt.get_device_count()
                except Exception as e:
                    errors.append([type(e).__name__, str(e)])
            os.write(write, json.dumps(errors).encode())
        finally:
            os._exit(0)
    os.close(write)
    go.send("forked")
    with os.fdopen(read, "rb") as f:
        errors = json.loads(f.read() or b"[]")
    os.waitpid(child, 0)
    return errors


@needs_fork
@fork_warning
def test_a_forked_child_that_cannot_reach_the_owner_gets_a_clear_error(owned):
    _, owner = owned
    ctx = mp.get_context("fork")
    ours, theirs = ctx.Pipe()
    result, there = ctx.Pipe()
    process = ctx.Process(target=_guarded, args=(_fork_after_the_owner_is_gone, there, theirs,
                                                 theirs), daemon=True)
    process.start()
    assert ours.poll(WAIT) and ours.recv() == "forked"
    owner.close()
    ours.send("closed")
    assert result.poll(WAIT)
    reply = result.recv()
    process.join(WAIT)
    assert reply[0] == "ok", reply
    assert len(reply[1]) == 2
    for kind, message in reply[1]:  # the same error each time, never a hang
        assert kind == "OwnerLost"
        assert "forked from a worker and could not connect to the owner" in message


# -- 2. an owner that cannot start a thread, and idle connections ------------------------------

def _greeted(owner):
    """A connection of the owner's own key, authenticated, and the pid of its process."""
    return worker_module._dial(owner.address, owner.authkey, WAIT)


def test_the_owner_accepts_on_after_a_thread_fails_to_start_and_closes_cleanly(monkeypatch):
    start = threading.Thread.start
    failed = []

    def failing_start(thread):
        if thread.name == "memsim-owner-worker" and not failed:
            failed.append(thread)
            raise RuntimeError("can't start new thread")
        return start(thread)

    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None}) as rt:
        owner = serve(rt, sanitizer={"output": None})
        monkeypatch.setattr(threading.Thread, "start", failing_start)
        with pytest.raises(worker_module.OwnerLost, match="closed the connection"):
            _greeted(owner)  # its thread did not start: end of file, not a hang
        assert failed
        conn, pid = _greeted(owner)  # the next worker is served
        conn.send_bytes(wire.pack({"call": "rt.get_device_count", "args": []}))
        assert conn.poll(WAIT) and wire.unpack(conn.recv_bytes())["ok"] == (1, 0)
        owner.close()  # never "cannot join thread before it is started"
        assert owner_module.ENV_ADDRESS not in os.environ  # the environment as it was
        assert owner_module.ENV_KEY not in os.environ
        assert pid in owner.ended
        conn.close()


def test_idle_connections_cost_no_thread_and_are_dropped(owned, monkeypatch):
    _, owner = owned
    monkeypatch.setattr(owner_module, "HANDSHAKE_SECONDS", 0.05)
    started = []
    start = threading.Thread.start

    def counting_start(thread):
        started.append(thread.name)
        return start(thread)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    family = socket.AF_UNIX if isinstance(owner.address, str) else socket.AF_INET
    idle = []
    for _ in range(48):  # three times the listen queue (owner_module.BACKLOG)
        sock = socket.socket(family)
        sock.connect(owner.address)  # blocks while the listen queue is full
        sock.settimeout(WAIT)
        idle.append(sock)
    # an honest worker waits for room in the full queue, and is served after them
    conn = mpc.Client(owner.address, authkey=owner.authkey)
    assert conn.poll(WAIT) and "pid" in wire.unpack(conn.recv_bytes())
    for sock in idle:  # each was challenged in turn, then dropped for its silence
        while sock.recv(1024):
            pass
        sock.close()
    # no thread, no timer, for a connection without the key: one for the honest worker
    assert started == ["memsim-owner-worker"]
    conn.close()


def test_connect_gives_up_on_an_owner_that_never_answers():
    import ascend_memsim

    family = socket.AF_UNIX if hasattr(socket, "AF_UNIX") else socket.AF_INET
    with mpc.Listener(family="AF_UNIX" if family == socket.AF_UNIX else "AF_INET") as silent:
        with pytest.raises(worker_module.OwnerLost, match=r"did not answer in 0\.2 s"):
            ascend_memsim.connect(silent.address, b"key", connect_timeout=0.2)
    assert worker_module._worker is None  # nothing installed


# -- 5, 6. host buffers: dropped when let go; changed arrays past one frame ---------------------

class Stepper:
    """A forked, connected worker that runs this module's functions when asked."""

    def __init__(self):
        ctx = mp.get_context("fork")
        self.pipe, there = ctx.Pipe()
        self.process = ctx.Process(target=_steps, args=(there,), daemon=True)
        self.process.start()

    def __call__(self, name, *args):
        self.pipe.send((name, *args))
        assert self.pipe.poll(WAIT), "the worker did not answer"
        reply = self.pipe.recv()
        assert reply[0] == "ok", reply
        return reply[1]

    def exit(self):
        self.pipe.send(None)
        self.process.join(WAIT)
        assert self.process.exitcode == 0


def _steps(pipe):
    import ascend_memsim

    ascend_memsim.connect()
    assert acl.rt.set_device(0) == 0
    while True:
        step = pipe.recv()
        if step is None:
            return
        try:
            pipe.send(("ok", globals()[step[0]](*step[1:])))
        except Exception as e:  # sent back for the test to see
            pipe.send(("raised", type(e).__name__, str(e)))


def _pid():
    return acl.rt.device_get_bare_tgid()[0]


_KEPT = []


def _temporaries(count, size):
    """``count`` bytes buffers of ``size`` copied to the device and let go; one kept."""
    kept = b"kept" * (size // 4)
    _KEPT.append((kept, acl.util.bytes_to_ptr(kept)))
    dev, ret = acl.rt.malloc(size, 0)
    assert ret == 0
    for i in range(count):
        data = bytes([i % 251]) * size
        assert acl.rt.memcpy(dev, size, acl.util.bytes_to_ptr(data), size, 1) == 0
        del data
    assert acl.rt.free(dev) == 0  # the next call: the last one goes too
    worker = worker_module._worker
    assert acl.util.ptr_to_bytes(_KEPT[0][1], 8) == b"keptkept"
    return len(worker._mirrors), sum(len(m[0]) for m in worker._mirrors.values())


@needs_fork
@fork_warning
def test_bytes_a_worker_lets_go_are_dropped_there_and_at_the_owner(owned):
    _, owner = owned
    worker = Stepper()
    pid = worker("_pid")
    assert worker("_temporaries", 200, MiB) == (1, MiB)  # the kept one only
    session = owner.sessions[pid]
    assert len(session.mirrors) == 1
    assert sum(len(copy[0]) for copy in session.mirrors.values()) == MiB
    worker.exit()
    assert owner.wait_ended(pid, WAIT) and owner.ended[pid] == []


_ARRAYS = []


def _two_changed_arrays(size):
    """Two registered arrays, both changed, then calls; each way past one frame."""
    a, b = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
    pa, pb = acl.util.numpy_to_ptr(a), acl.util.numpy_to_ptr(b)
    _ARRAYS.extend((a, b))
    a[:], b[:] = 1, 2
    assert acl.rt.get_device_count() == (1, 0)  # the changes go ahead of it
    assert acl.rt.get_device_count() == (1, 0)  # and later calls work
    seen = [acl.util.ptr_to_bytes(p + at, 4) for p in (pa, pb) for at in (0, size - 4)]
    dev, ret = acl.rt.malloc(2 * size, 0)
    assert ret == 0
    assert acl.rt.memcpy(dev, size, pa, size, 1) == 0
    assert acl.rt.memcpy(dev + size, size, pb, size, 1) == 0
    a[:], b[:] = 0, 0
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy_async(pa, size, dev, size, 2, stream) == 0
    assert acl.rt.memcpy_async(pb, size, dev + size, size, 2, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0  # both written back: two frames
    acl.rt.destroy_stream(stream)
    acl.rt.free(dev)
    return seen, bool((a == 1).all()), bool((b == 2).all())


def _check_two_arrays(size):
    worker = Stepper()
    seen, a_back, b_back = worker("_two_changed_arrays", size)
    assert seen == [b"\x01" * 4] * 2 + [b"\x02" * 4] * 2  # the owner's copies, in step
    assert a_back and b_back
    worker.exit()


@needs_fork
@fork_warning
def test_changed_arrays_past_one_frame_go_apart_and_never_wedge_the_worker(owned, monkeypatch):
    monkeypatch.setattr(wire, "MAX_MESSAGE", MiB)  # the forked worker inherits it
    _check_two_arrays(400 * 1024)  # each fits a frame (base64: 4/3), the two do not


def _two_changed_big_arrays(size):
    a, b = np.zeros(size, np.uint8), np.ones(size, np.uint8)
    pa, pb = acl.util.numpy_to_ptr(a), acl.util.numpy_to_ptr(b)
    _ARRAYS.extend((a, b))
    a[-1], b[-1] = 7, 8
    out = [acl.rt.get_device_count(), acl.rt.get_device_count()]
    return out + [acl.util.ptr_to_bytes(pa + size - 2, 2), acl.util.ptr_to_bytes(pb, 2)]


@needs_fork
@fork_warning
def test_two_changed_30_mib_arrays_at_the_real_frame_limit(owned):
    worker = Stepper()
    assert worker("_two_changed_big_arrays", 30 * MiB) == [(1, 0), (1, 0), b"\x00\x07",
                                                           b"\x01\x01"]
    worker.exit()
