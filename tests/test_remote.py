"""Simulated processes across real Python processes (ascend_memsim.remote): the test process
owns the machine and serves it; workers started by multiprocessing (spawn and fork) use the
pyacl face, which runs their calls at the owner as their own simulated processes. They share
a block by IPC key (11-07) and a VMM handle by shareable handle (11-04) with the owner and
each other, misuse comes back as codes, a killed worker is cleaned up, and a hostile peer
gets errors and never stops the owner."""

import inspect
import json
import multiprocessing as mp
import os
import signal
import threading
from multiprocessing import connection as mpc

import numpy as np
import pytest

from ascend_memsim import MiB, Runtime, acl, serve
from ascend_memsim.memory.constants import ErrorCode
from ascend_memsim.remote import owner as owner_module
from ascend_memsim.remote import wire

SEG = 2 * MiB
RT_PARAM = int(ErrorCode.RT_PARAM_INVALID)
NO_PERMISSION = int(ErrorCode.RT_NO_PERMISSION)
WAIT = 60  # seconds; a generous bound (spawn imports the package), never an expected time


def _prop(device=0):
    return {"handleType": 0, "allocationType": 0, "memAttr": acl.ACL_HBM_MEM_HUGE,
            "location": {"id": device, "type": acl.ACL_MEM_LOCATION_TYPE_DEVICE}, "reserve": 0}


# -- the worker: runs the parent's steps through its own pyacl face -------------------------

def _worker_main(pipe):
    import ascend_memsim
    ascend_memsim.connect()
    import acl  # the simulator's face, now the owner's

    def call(name, *args):
        namespace, _, fn = name.rpartition(".")
        return getattr(getattr(acl, namespace) if namespace else acl, fn)(*args)

    while True:
        step = pipe.recv()
        if step[0] == "exit":
            return
        if step[0] == "hang":
            pipe.send("hanging")
            signal.pause()
        try:
            if step[0] == "call":
                out = call(*step[1:])
            elif step[0] == "write":  # a numpy array's bytes to the device
                _, ptr, data = step
                host = np.frombuffer(data, np.uint8).copy()
                out = acl.rt.memcpy(ptr, len(data), acl.util.numpy_to_ptr(host), len(data), 1)
            elif step[0] == "dropped":  # a host buffer no one holds any more is freed there
                host = np.zeros(8, np.uint8)
                stale = acl.util.numpy_to_ptr(host)
                del host
                out = acl.rt.memcpy(stale, 8, step[1], 8, 2)
            elif step[0] == "read":  # device bytes into a worker's buffer, three ways
                _, ptr, size, how = step
                if how == "numpy":
                    host = np.zeros(size, np.uint8)
                    ret = acl.rt.memcpy(acl.util.numpy_to_ptr(host), size, ptr, size, 2)
                    out = ret, host.tobytes()
                elif how == "async":  # written back after the synchronize that ends it
                    host = np.zeros(size, np.uint8)
                    stream, _ = acl.rt.create_stream()
                    ret = acl.rt.memcpy_async(acl.util.numpy_to_ptr(host), size, ptr, size, 2,
                                              stream)
                    ret = ret or acl.rt.synchronize_stream(stream)
                    acl.rt.destroy_stream(stream)
                    out = ret, host.tobytes()
                elif how == "bytes":
                    host = bytes(size)
                    ret = acl.rt.memcpy(acl.util.bytes_to_ptr(host), size, ptr, size, 2)
                    out = ret, bytes(host)
                else:
                    host, _ = acl.rt.malloc_host(size)
                    ret = acl.rt.memcpy(host, size, ptr, size, 2)
                    out = ret, acl.util.ptr_to_bytes(host, size)
                    acl.rt.free_host(host)
            pipe.send(("ok", out))
        except Exception as e:  # sent back for the test to see
            pipe.send(("raised", type(e).__name__, str(e)))


class Remote:
    def __init__(self, ctx):
        self.pipe, there = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(there,), daemon=True)
        self.process.start()

    def step(self, *step):
        self.pipe.send(step)
        assert self.pipe.poll(WAIT), "the worker did not answer"
        reply = self.pipe.recv()
        assert reply[0] == "ok", reply
        return reply[1]

    def raises(self, *step):
        self.pipe.send(step)
        assert self.pipe.poll(WAIT), "the worker did not answer"
        reply = self.pipe.recv()
        assert reply[0] == "raised", reply
        return reply[1]

    def acl(self, name, *args):
        return self.step("call", name, *args)

    def map(self, handle, size=SEG):
        base, ret = self.acl("rt.reserve_mem_address", size, 0, 0, 0)
        assert ret == 0
        assert self.acl("rt.map_mem", base, size, 0, handle, 0) == 0
        return base

    def unmap(self, base):
        assert self.acl("rt.unmap_mem", base) == 0
        assert self.acl("rt.release_mem_address", base) == 0

    def exit(self):
        self.pipe.send(("exit",))
        self.process.join(WAIT)
        assert self.process.exitcode == 0


@pytest.fixture
def owned():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None}) as rt:
        with serve(rt, sanitizer={"output": None}) as owner:
            acl.rt.set_device(0)
            yield rt, owner


def _host_read(ptr, size):
    host, _ = acl.rt.malloc_host(size)
    assert acl.rt.memcpy(host, size, ptr, size, 2) == 0
    data = acl.util.ptr_to_bytes(host, size)
    acl.rt.free_host(host)
    return data


def test_two_spawned_workers_share_by_ipc_key_and_shareable_handle(owned):
    rt, owner = owned
    a, b = Remote(mp.get_context("spawn")), Remote(mp.get_context("spawn"))
    for w in (a, b):
        assert w.acl("rt.set_device", 0) == 0
    (pa, ret_a), (pb, ret_b) = a.acl("rt.device_get_bare_tgid"), b.acl("rt.device_get_bare_tgid")
    assert ret_a == ret_b == 0 and len({pa, pb, rt.pid}) == 3
    assert sorted(owner.sessions) == sorted([pa, pb])
    # aclInit / aclFinalize of the worker's process; the util helpers raise, as pyacl's
    assert a.acl("init") == 0
    assert a.acl("init") == int(ErrorCode.REPEAT_INITIALIZE)
    assert a.acl("finalize") == 0
    assert a.raises("call", "util.ptr_to_bytes", 12345, 4) == "InvalidPointer"
    assert a.raises("call", "util.numpy_to_ptr", b"not an array") == "InvalidArgumentType"
    assert a.acl("rt.launch_callback", print, None, 0, 0) == int(
        ErrorCode.RT_FEATURE_NOT_SUPPORT)  # a callable cannot cross

    # IPC key: the owner's block, imported by A only (the whitelist)
    ptr, _ = acl.rt.malloc(4096, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    text = b"from the owner"
    assert acl.rt.memcpy(ptr, len(text), acl.util.bytes_to_ptr(text), len(text), 1) == 0
    key, ret = acl.rt.ipc_mem_get_export_key(ptr, 4096, 65,
                                             acl.ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT)
    assert ret == 0
    assert acl.rt.ipc_mem_set_import_pid(key, [pa]) == 0
    assert b.acl("rt.ipc_mem_import_by_key", key, 0) == (0, NO_PERMISSION)
    assert a.acl("rt.ipc_mem_set_import_pid", key, [pb]) == RT_PARAM  # not the exporter
    assert a.acl("rt.ipc_mem_import_by_key", "no such key", 0)[1] == RT_PARAM
    mine, ret = a.acl("rt.ipc_mem_import_by_key", key, 0)
    assert ret == 0
    for how in ("numpy", "async", "bytes", "host"):
        assert a.step("read", mine, len(text), how) == (0, text)
    assert a.step("write", mine + 100, b"from A") == 0
    assert _host_read(ptr + 100, 6) == b"from A"
    assert a.acl("rt.ipc_mem_close", key) == 0
    assert acl.rt.ipc_mem_close(key) == 0
    assert acl.rt.free(ptr) == 0

    # shareable handle: B's physical memory, imported by A
    handle, ret = b.acl("rt.malloc_physical", SEG, _prop(), 0)
    assert ret == 0
    shared, ret = b.acl("rt.mem_export_to_shareable_handle", handle, 0, 0)
    assert ret == 0
    assert b.acl("rt.mem_export_to_shareable_handle", handle, 0, 0)[1] == RT_PARAM  # one only
    assert b.acl("rt.mem_set_pid_to_shareable_handle", shared, [pa]) == 0
    assert acl.rt.mem_import_from_shareable_handle(shared, 0)[1] == NO_PERMISSION
    base_b = b.map(handle)
    assert b.step("write", base_b, b"from B") == 0
    theirs, ret = a.acl("rt.mem_import_from_shareable_handle", shared, 0)
    assert ret == 0
    base_a = a.map(theirs)
    assert a.step("read", base_a, 6, "bytes") == (0, b"from B")
    assert a.step("write", base_a + 64, b"from A") == 0
    assert b.step("read", base_b + 64, 6, "numpy") == (0, b"from A")
    a.unmap(base_a)
    assert a.acl("rt.free_physical", theirs) == 0
    b.unmap(base_b)
    assert b.acl("rt.free_physical", handle) == 0

    for w, pid in ((a, pa), (b, pb)):
        w.exit()
        assert owner.wait_ended(pid, WAIT)
        assert owner.ended[pid] == []  # nothing left live


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork start method needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_killed_fork_worker_is_finalized(owned):
    _, owner = owned
    w = Remote(mp.get_context("fork"))
    assert w.acl("rt.set_device", 0) == 0
    pid, _ = w.acl("rt.device_get_bare_tgid")
    ptr, ret = w.acl("rt.malloc", 4096, 0)
    assert ret == 0
    key, ret = w.acl("rt.ipc_mem_get_export_key", ptr, 4096, 65,
                     acl.ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION)
    assert ret == 0
    assert w.step("write", ptr, b"worker bytes") == 0
    mine, ret = acl.rt.ipc_mem_import_by_key(key, 0)
    assert ret == 0 and _host_read(mine, 12) == b"worker bytes"
    # the sanitizer of the worker's process reports where in the worker a call came from
    assert w.step("read", ptr + 2048, 8, "numpy")[0] == 0
    process = owner.sessions[pid].process
    report = process.sanitizer.reports[-1]
    assert report.kind == "uninitialized-read"
    assert [f.name for f in report.call_site] == ["_worker_main"]
    assert [f.name for f in report.alloc_site] == ["_worker_main", "call"]
    # a host buffer the worker dropped is gone at the owner too (its next use is refused)
    assert w.step("dropped", ptr) == RT_PARAM  # as in one process: a freed buffer
    w.pipe.send(("hang",))
    assert w.pipe.poll(WAIT) and w.pipe.recv() == "hanging"
    os.kill(w.process.pid, signal.SIGKILL)
    w.process.join(WAIT)
    assert owner.wait_ended(pid, WAIT)
    assert pid not in owner.sessions
    assert [call for call, _ in owner.ended[pid]] == ["aclFinalize"]  # its block, a leak
    assert "4096-byte block" in owner.ended[pid][0][1]
    leak = process.sanitizer.reports[-1]
    assert leak.kind == "leak" and not leak.call_site  # not the owner's serving thread
    assert [f.name for f in leak.alloc_site] == ["_worker_main", "call"]
    # its key went with it: no new import
    assert acl.rt.ipc_mem_import_by_key(key, 0)[1] == RT_PARAM
    assert acl.rt.ipc_mem_close(key) == 0  # the owner's import closes


def test_the_owner_itself_cannot_connect(owned):
    import ascend_memsim

    with pytest.raises(RuntimeError, match="serves the machine"):
        ascend_memsim.connect()
    assert acl.rt.get_device() == (0, 0)  # its face is its own still


def _peer(owner, authkey=None):
    conn = mpc.Client(owner.address, authkey=authkey or owner.authkey)
    assert conn.poll(WAIT)
    hello = wire.unpack(conn.recv_bytes())
    return conn, hello["pid"]


def _ask(conn, data):
    conn.send_bytes(data if isinstance(data, bytes) else wire.pack(data))
    assert conn.poll(WAIT)
    return wire.unpack(conn.recv_bytes())


def test_hostile_messages_get_errors_and_the_owner_serves_on(owned, monkeypatch):
    _, owner = owned
    conn, pid = _peer(owner)
    deep = {"L": []}
    for _ in range(200):
        deep = {"L": [deep]}
    for bad in (b"not json", b"\xff\xfe", b"[1, 2]", b'{"call": 5}', b'{"X": 1}',
                b'{"B": "!!!"}', wire.pack({"call": "rt.malloc", "args": 7}),
                b'{"D": [[{"L": []}, 1]]}',
                json.dumps({"D": [["call", "rt.malloc"], ["args", deep]]}).encode(),
                wire.pack({"call": "rt.malloc", "args": [], "push": [[123, b"xx"]]}),
                wire.pack({"call": "rt.malloc", "args": [], "drop": [123]}),
                wire.pack({"call": "rt.malloc", "args": [], "drop": [[1]]}),
                wire.pack({"call": "rt.malloc", "args": [], "push": [[[1], b"xx"]]}),
                wire.pack({"call": "rt.malloc", "args": [], "site": [[1, 2, 3]]}),
                wire.pack({"call": "rt.malloc", "args": [], "site": [["f", 1, "g"]] * 99})):
        reply = _ask(conn, bad)
        assert reply["raise"] == "ValueError", (bad, reply)
    for name in ("rt.no_such_call", "os.system", "__import__", "rt.__class__"):
        assert _ask(conn, {"call": name, "args": ["x"]})["raise"] == "AttributeError"
    assert _ask(conn, {"call": "rt.malloc", "args": [1]})["raise"] == "TypeError"  # arity
    assert _ask(conn, {"call": "rt.set_device", "args": [0]})["ok"] == 0
    reply = _ask(conn, {"call": "rt.malloc", "args": ["x", None]})
    assert reply["ok"][1] == int(ErrorCode.INVALID_PARAM) and "err" in reply
    # a raw host address means the owner's memory: refused, nothing read or written
    secret = np.frombuffer(bytearray(b"owner's secret!!"), np.uint8)
    dev = _ask(conn, {"call": "rt.malloc", "args": [64, 0]})["ok"][0]
    for args in ([dev, 16, secret.ctypes.data, 16, 1], [secret.ctypes.data, 16, dev, 16, 2]):
        reply = _ask(conn, {"call": "rt.memcpy", "args": args})
        assert reply["ok"] == RT_PARAM and "raw host addresses" in reply["err"]
    assert secret.tobytes() == b"owner's secret!!"
    # the copies of a worker's arrays: pushed bytes land, a refused message changes nothing
    ro = _ask(conn, {"call": "util.numpy_to_ptr", "args": ["<u2", [2], b"abcd", False, True]})
    ro = ro["ok"]
    for bad in ({"call": "rt.no_such_call", "args": [], "push": [[ro, b"zzzz"]]},
                {"call": "rt.get_device", "args": [], "push": [[ro, b"zzzz"]], "site": 5}):
        assert "raise" in _ask(conn, bad)
    assert _ask(conn, {"call": "util.ptr_to_bytes", "args": [ro, 4]})["ok"] == b"abcd"
    assert _ask(conn, {"call": "util.ptr_to_bytes", "args": [ro, 4],
                       "push": [[ro, b"wxyz"]]})["ok"] == b"wxyz"
    assert _ask(conn, {"call": "util.ptr_to_bytes", "args": [ro, 4],
                       "drop": [ro, ro]})["raise"] == "AclError"  # dropped: freed
    assert _ask(conn, {"call": "util.numpy_to_ptr", "args": ["O", [1], b"12345678", True,
                                                                True]})["raise"] == "AclError"
    # the calls that take a Python callable are refused with a code
    for name, args in (("rt.process_report", [10]), ("rt.subscribe_report", [1, 0])):
        reply = _ask(conn, {"call": name, "args": args})
        assert reply["ok"] == int(ErrorCode.RT_FEATURE_NOT_SUPPORT)

    # a frame over the limit ends that connection (the stream cannot be read on)
    monkeypatch.setattr(wire, "MAX_MESSAGE", 1024)
    assert _ask(conn, {"call": "rt.get_device", "args": []})["ok"] == (0, 0)  # read at the old
    conn.send_bytes(b"x" * 2048)
    assert conn.poll(WAIT)
    assert "ended" in wire.unpack(conn.recv_bytes())["message"]
    assert owner.wait_ended(pid, WAIT)
    monkeypatch.undo()

    # a wrong key, and a peer that never authenticates, do not stop the owner
    with pytest.raises(mpc.AuthenticationError):
        mpc.Client(owner.address, authkey=b"wrong")
    import socket
    silent = socket.socket(socket.AF_UNIX if isinstance(owner.address, str) else socket.AF_INET)
    silent.connect(owner.address)
    silent.settimeout(WAIT)
    silent.recv(1024)  # the challenge, then silence
    # the owner's own face and a new worker connection work throughout, the silent one
    # still in its handshake (test_remote_hostile: it is dropped at its deadline)
    conn2, pid2 = _peer(owner)
    assert _ask(conn2, {"call": "rt.device_get_bare_tgid", "args": []})["ok"] == (pid2, 0)
    conn2.close()
    silent.close()
    assert owner.wait_ended(pid2, WAIT)
    assert acl.rt.get_device() == (0, 0)


def test_the_wire_carries_plain_values_only(monkeypatch):
    value = {"a": [1, 2.5, None, True, "s", b"\x00\xff", (3, 4)], 5: {"x": b""}}
    assert wire.unpack(wire.pack(value)) == value
    with pytest.raises(wire.WireError):
        wire.pack({"f": print})
    with pytest.raises(wire.WireError):
        wire.pack({"a": np.zeros(2)})
    monkeypatch.setattr(wire, "MAX_MESSAGE", 1024)
    with pytest.raises(wire.TooBig):
        wire.pack({"a": b"x" * 1024})
    with pytest.raises(wire.TooBig):
        wire.unpack(b" " * 1025)


def test_a_thread_acting_as_another_process_leaves_the_face_of_the_others():
    from ascend_memsim.runtime.process import acting_as

    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None}) as a:
        b = a.spawn_process(sanitizer={"output": None})
        seen, go, done = [], threading.Event(), threading.Event()

        def serve_b():
            with acting_as(b):
                seen.append(acl.rt.device_get_bare_tgid()[0])
                go.set()
                done.wait(WAIT)
                seen.append(acl.rt.device_get_bare_tgid()[0])
            seen.append(acl.rt.device_get_bare_tgid()[0])

        thread = threading.Thread(target=serve_b)
        thread.start()
        assert go.wait(WAIT)
        assert acl.rt.device_get_bare_tgid()[0] == a.pid  # this thread: still a
        done.set()
        thread.join(WAIT)
        assert seen == [b.pid, b.pid, a.pid]
        with acting_as(b), pytest.raises(RuntimeError):
            with acting_as(a):
                pass
        b.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork start method needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_an_owner_that_closes_ends_its_workers_processes():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None}) as rt:
        owner = serve(rt, sanitizer={"output": None})
        assert os.environ[owner_module.ENV_ADDRESS]
        w = Remote(mp.get_context("fork"))
        assert w.acl("rt.set_device", 0) == 0
        pid, _ = w.acl("rt.device_get_bare_tgid")
        ptr, _ = w.acl("rt.malloc", 4096, 0)
        owner.close()
        assert pid in owner.ended and "4096-byte block" in owner.ended[pid][0][1]
        assert owner_module.ENV_ADDRESS not in os.environ  # the environment as it was
        assert w.raises("call", "rt.free", ptr) == "OwnerLost"  # never a hang
        w.exit()


def test_every_served_call_with_bad_arguments_answers_and_the_owner_serves_on(owned):
    _, owner = owned
    conn, _ = _peer(owner)
    assert _ask(conn, {"call": "rt.set_device", "args": [0]})["ok"] == 0
    answered = 0
    for name, fn in sorted(owner_module._table().items()):
        if name in ("finalize", "rt.reset_device"):
            continue
        target = getattr(fn, "__wrapped__", fn)
        count = sum(p.default is p.empty for p in inspect.signature(target).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        count -= name in owner_module._HOST_CALLS  # the session itself
        for value in (0, "x", None, -1):
            reply = _ask(conn, {"call": name, "args": [value] * count})
            # a code, or the error a util helper raises; never the owner failing
            assert "ok" in reply or reply["raise"] == "AclError", (name, value, reply)
            answered += 1
    assert answered > 400
    assert _ask(conn, {"call": "rt.get_device", "args": []})["ok"] == (0, 0)
