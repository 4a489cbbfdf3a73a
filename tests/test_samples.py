"""End to end: programs written like the vendor's pyacl memory samples, run through install_acl.

The two programs below follow the call sequences of the vendor's samples
``memcpy_host_device_python`` and ``memcpy_host_device_async_python`` (Ascend/samples,
python/level1_single_api/1_acl/2_memory_management), including the ``bytes_to_ptr`` +
``np.frombuffer`` read-back, but are our own code. Each runs in a fresh interpreter where
``import acl`` resolves to the simulator.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMON = '''
import argparse
import logging

import numpy as np
import acl

ACL_SUCCESS = 0
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_DDR_MEM, ACL_HBM_MEM = 0, 1
ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST = 0, 1, 2

log = logging.getLogger("memory_walkthrough")
log.setLevel(logging.DEBUG)
_handler = logging.StreamHandler(sys.stdout)
_handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
log.addHandler(_handler)


def failed(what, ret):
    if ret != ACL_SUCCESS:
        log.error("%s failed ret = %s", what, ret)
        return True
    return False


def show(label, ptr, size, kind):
    """Copy ``size`` bytes at ``ptr`` into a bytes object and print them as an array."""
    template = np.ones(size, dtype=np.byte)
    if "bytes_to_ptr" in dir(acl.util):
        raw = template.tobytes()
        raw_ptr = acl.util.bytes_to_ptr(raw)
    else:
        raw_ptr = acl.util.numpy_to_ptr(template)
    failed("acl.rt.memcpy", acl.rt.memcpy(raw_ptr, size, ptr, size, kind))
    if "bytes_to_ptr" in dir(acl.util):
        template = np.frombuffer(raw, dtype=template.dtype).reshape(template.shape)
    log.info("%s is %s", label, template)


def report_memory(step):
    for name, attr in (("DDR", ACL_DDR_MEM), ("HBM", ACL_HBM_MEM)):
        free, total, ret = acl.rt.get_mem_info(attr)
        if failed("acl.rt.get_mem_info", ret):
            sys.exit(1)
        log.info("step %s: %s free %s of %s bytes", step, name, free, total)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device_id", type=int, default=0)
    parser.add_argument("--memory_size", type=int, default=64)
    parser.add_argument("--cycles", type=int, default=2)
    return parser.parse_args()
'''

SYNC = COMMON + '''

def main():
    args = parse_args()
    size = args.memory_size
    if failed("acl.init", acl.init()):
        sys.exit(1)
    if failed("acl.rt.set_device", acl.rt.set_device(args.device_id)):
        sys.exit(1)
    context, ret = acl.rt.create_context(args.device_id)
    if failed("acl.rt.create_context", ret):
        sys.exit(1)
    report_memory(0)
    for cycle in range(args.cycles):
        host_buffer, ret = acl.rt.malloc_host(size)
        failed("acl.rt.malloc_host", ret)
        device_buffer, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
        failed("acl.rt.malloc", ret)
        failed("acl.rt.memset", acl.rt.memset(host_buffer, size, 7, size))
        show("At first memset host data", host_buffer, size, ACL_MEMCPY_HOST_TO_HOST)
        failed("acl.rt.memcpy", acl.rt.memcpy(device_buffer, size, host_buffer, size,
                                              ACL_MEMCPY_HOST_TO_DEVICE))
        show("At memcpy device data", device_buffer, size, ACL_MEMCPY_DEVICE_TO_HOST)
        back, ret = acl.rt.malloc_host(size)
        failed("acl.rt.memcpy", acl.rt.memcpy(back, size, device_buffer, size,
                                              ACL_MEMCPY_DEVICE_TO_HOST))
        show("Write back host data", back, size, ACL_MEMCPY_HOST_TO_HOST)
        failed("acl.rt.free_host", acl.rt.free_host(back))
        report_memory(cycle + 1)
        failed("acl.rt.free_host", acl.rt.free_host(host_buffer))
        failed("acl.rt.free", acl.rt.free(device_buffer))
    failed("acl.rt.destroy_context", acl.rt.destroy_context(context))
    failed("acl.rt.reset_device", acl.rt.reset_device(args.device_id))
    failed("acl.finalize", acl.finalize())


main()
'''

ASYNC = COMMON + '''

def main():
    args = parse_args()
    size = args.memory_size
    if failed("acl.init", acl.init()) or failed("acl.rt.set_device",
                                                acl.rt.set_device(args.device_id)):
        sys.exit(1)
    context, ret = acl.rt.create_context(args.device_id)
    stream, ret = acl.rt.create_stream()
    failed("acl.rt.create_stream", ret)
    spare_stream, ret = acl.rt.create_stream()
    report_memory(0)
    device_buffers = []
    for cycle in range(args.cycles):
        host_buffer, ret = acl.rt.malloc_host(size)
        failed("acl.rt.memset_async", acl.rt.memset_async(host_buffer, size, 7, size, stream))
        device_buffer, ret = acl.media.dvpp_malloc(size)
        failed("acl.media.dvpp_malloc", ret)
        device_buffers.append(device_buffer)
        failed("acl.rt.synchronize_stream", acl.rt.synchronize_stream(stream))
        show("At first memset host data", host_buffer, size, ACL_MEMCPY_HOST_TO_HOST)
        failed("acl.rt.memcpy_async", acl.rt.memcpy_async(
            device_buffer, size, host_buffer, size, ACL_MEMCPY_HOST_TO_DEVICE, stream))
        result_buffer, ret = acl.rt.malloc_host(size)
        report_memory(cycle + 1)
        failed("acl.rt.synchronize_stream", acl.rt.synchronize_stream(stream))
        show("At memcpy device data", device_buffer, size, ACL_MEMCPY_DEVICE_TO_HOST)
        failed("acl.rt.memcpy_async", acl.rt.memcpy_async(
            result_buffer, size, device_buffer, size, ACL_MEMCPY_DEVICE_TO_HOST, stream))
        failed("acl.rt.free_host", acl.rt.free_host(host_buffer))
        failed("acl.rt.synchronize_stream", acl.rt.synchronize_stream(stream))
        show("Copied back host data", result_buffer, size, ACL_MEMCPY_HOST_TO_HOST)
        failed("acl.rt.free_host", acl.rt.free_host(result_buffer))
    for device_buffer in device_buffers:
        failed("acl.media.dvpp_free", acl.media.dvpp_free(device_buffer))
    failed("acl.rt.destroy_stream", acl.rt.destroy_stream(spare_stream))
    failed("acl.rt.destroy_stream", acl.rt.destroy_stream(stream))
    failed("acl.rt.destroy_context", acl.rt.destroy_context(context))
    failed("acl.rt.reset_device", acl.rt.reset_device(args.device_id))
    failed("acl.finalize", acl.finalize())
    print("run success!")


main()
'''

LAUNCH = ("import sys, runpy, ascend_memsim; ascend_memsim.install_acl(); "
          "sys.argv = [sys.argv[1]] + sys.argv[2:]; runpy.run_path(sys.argv[0], "
          "run_name='__main__')")


def run(tmp_path, program, *args):
    path = tmp_path / "program.py"
    path.write_text("import sys\n" + textwrap.dedent(program))
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-c", LAUNCH, str(path), *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("size, shown", [("64", "[7 7 7 7"), ("10485760", "[7 7 7 ... 7 7 7]")])
def test_sync_walkthrough(tmp_path, size, shown):
    done = run(tmp_path, SYNC, "--memory_size", size)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "failed" not in out
    for label in ("At first memset host data is", "At memcpy device data is",
                  "Write back host data is"):
        lines = [line for line in out.splitlines() if label in line]
        assert len(lines) == 2 and all(shown in line for line in lines), out
    assert "1 " not in re.sub(r"\d{2,}", "", " ".join(
        line.split(" is ", 1)[1] for line in out.splitlines() if " is [" in line))
    assert "step 0: HBM free" in out
    # Nothing leaked, nothing wrong: the sanitizer (on by default) stayed quiet.
    assert "=========" not in done.stderr


def test_async_walkthrough(tmp_path):
    done = run(tmp_path, ASYNC, "--cycles", "2")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.rstrip().endswith("run success!")
    assert "failed" not in out
    for label in ("At first memset host data is [7 7", "At memcpy device data is [7 7",
                  "Copied back host data is [7 7"):
        assert out.count(label) == 2, out
    assert "=========" not in done.stderr


def test_a_buggy_variant_is_named_by_the_sanitizer(tmp_path):
    """The same program with the device buffer freed while a copy to it is still queued."""
    buggy = ASYNC.replace(
        '''        result_buffer, ret = acl.rt.malloc_host(size)''',
        '''        result_buffer, ret = acl.rt.malloc_host(size)
        acl.media.dvpp_free(device_buffer)
        device_buffers.remove(device_buffer)''')
    done = run(tmp_path, buggy, "--cycles", "1")
    assert "[free-with-pending-work]" in done.stderr
    assert "[use-after-free]" in done.stderr
    assert "acl.rt.synchronize_stream failed ret = 107000" in done.stdout
