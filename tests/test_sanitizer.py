"""The sanitizer: one test per finding, the modes, the text form, configuration."""

import ctypes
import io
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ascend_memsim import FailNth, InvalidPointer, MiB, Runtime, acl
from ascend_memsim.checks.reports import KINDS
from ascend_memsim.checks.sanitizer import Sanitizer, SanitizerError
from ascend_memsim.memory.constants import ErrorCode, MallocFlag, MallocPolicy
from ascend_memsim.memory.sites import _PACKAGE_DIR as _PACKAGE

H2D, D2H = 1, 2


def make(mode="report", **options):
    out = io.StringIO()
    rt = Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(mode, output=out, **options))
    rt.set_device(0)
    rt.out = out
    return rt, out


@pytest.fixture
def rt():
    with make()[0] as runtime:
        yield runtime


@pytest.fixture
def strict():
    with make("strict")[0] as runtime:
        yield runtime


def kinds(rt):
    return [r.kind for r in rt.sanitizer.reports]


def site_names(site):
    return [frame.name for frame in site]


def allocate_here(rt, size=100):
    return rt.malloc(size)


def free_here(rt, ptr):
    rt.free(ptr)


# -- frees ----------------------------------------------------------------------------------------

def test_invalid_free(rt):
    ptr = rt.malloc(100)
    with pytest.raises(InvalidPointer):
        rt.free(ptr + 64)
    report, = rt.sanitizer.reports
    assert report.kind == "invalid-free" and report.call == "aclrtFree"
    assert "64 bytes inside the 100-byte block" in report.where
    assert acl.rt.free(123456789) == ErrorCode.RT_PARAM_INVALID
    assert kinds(rt) == ["invalid-free", "invalid-free"]


def test_invalid_free_of_an_interior_pointer_names_the_blocks_sites(rt):
    """Issue 9: an invalid free of an interior pointer gave no allocation stack, though the
    report names the block. Live blocks (device, host) give their allocation site; a freed
    block its allocation and free sites."""
    ptr = allocate_here(rt)
    assert acl.rt.free(ptr + 64) == ErrorCode.RT_PARAM_INVALID
    host = rt.malloc_host(256)
    assert acl.rt.free_host(host + 64) == ErrorCode.RT_PARAM_INVALID
    freed = allocate_here(rt, 4096)
    free_here(rt, freed)
    assert acl.rt.free(freed + 128) == ErrorCode.RT_PARAM_INVALID
    live, host_report, stale = rt.sanitizer.reports
    assert {r.kind for r in (live, host_report, stale)} == {"invalid-free"}
    assert "100-byte block" in live.block and "allocate_here" in site_names(live.alloc_site)
    assert host_report.block is not None and host_report.alloc_site is not None
    assert "allocate_here" in site_names(stale.alloc_site)
    assert "free_here" in site_names(stale.free_site)
    assert "allocated at" in live.format() and "freed at" in stale.format()
    rt.free(ptr)
    rt.free_host(host)


def test_double_free_names_the_alloc_and_free_sites(rt):
    ptr = allocate_here(rt)
    free_here(rt, ptr)
    assert acl.rt.free(ptr) == ErrorCode.RT_PARAM_INVALID
    report, = rt.sanitizer.reports
    assert report.kind == "double-free"
    assert "allocate_here" in site_names(report.alloc_site)
    assert "free_here" in site_names(report.free_site)
    assert "test_double_free_names_the_alloc_and_free_sites" in site_names(report.call_site)
    text = rt.out.getvalue()
    assert "ERROR: Invalid free" in text and "[double-free]" in text
    assert "allocated at:" in text and "freed at:" in text and "in allocate_here" in text


def test_double_free_of_host_memory(rt):
    ptr = rt.malloc_host(64)
    rt.free_host(ptr)
    assert acl.rt.free_host(ptr) == ErrorCode.RT_PARAM_INVALID
    assert kinds(rt) == ["double-free"]


# -- accesses -------------------------------------------------------------------------------------

def test_use_after_free(rt):
    ptr = allocate_here(rt)
    rt.memset(ptr, 100, 0, 100)
    free_here(rt, ptr)
    host = rt.malloc_host(100)
    assert acl.rt.memcpy(host, 100, ptr + 8, 50, D2H) == ErrorCode.RT_PARAM_INVALID
    report, = rt.sanitizer.reports
    assert report.kind == "use-after-free" and report.write is False
    assert "8 bytes inside the 100-byte block" in report.where and "freed" in report.where
    assert "free_here" in site_names(report.free_site)


def test_without_quarantine_a_stale_pointer_is_silently_reused(rt):
    ptr = rt.malloc(100)
    rt.free(ptr)
    assert rt.malloc(100) == ptr
    rt.memset(ptr, 100, 1, 100)
    assert kinds(rt) == []


def test_quarantine_keeps_freed_blocks_from_reuse():
    rt, _ = make(quarantine_bytes=1 * MiB)
    with rt:
        ptr = rt.malloc(100)
        rt.free(ptr)
        other = rt.malloc(100)
        assert other != ptr
        assert acl.rt.memset(ptr, 100, 1, 100) == ErrorCode.RT_PARAM_INVALID
        assert acl.rt.free(ptr) == ErrorCode.RT_PARAM_INVALID
        assert kinds(rt) == ["use-after-free", "double-free"]
        # Over budget, the oldest are really released.
        big = rt.malloc(2 * MiB)
        rt.free(big)
        assert rt.block(ptr) is None
        rt.free(other)
    assert "leak" not in kinds(rt)


def test_quarantine_gives_way_when_memory_runs_short():
    rt, _ = make(quarantine_bytes=1 << 40)
    with rt:
        ptrs = [rt.malloc(8 * MiB) for _ in range(5)]
        for p in ptrs:
            rt.free(p)
        again = rt.malloc(48 * MiB)
        rt.free(again)
        assert not any(k == "leak" for k in kinds(rt))


def test_invalid_address_names_the_nearest_block(rt):
    ptr = rt.malloc(100)
    block = rt.block(ptr)
    assert block.footprint == 192
    host = rt.malloc_host(8)
    assert acl.rt.memcpy(host, 8, ptr + 196, 8, D2H) == ErrorCode.RT_PARAM_INVALID
    report, = rt.sanitizer.reports
    assert report.kind == "invalid-address"
    assert report.where == (f"{ptr + 196:#x} is 96 bytes past the end of the "
                            f"{block.describe()}")


def test_out_of_bounds_past_the_footprint(rt):
    ptr = rt.malloc(100)
    rt.memset(ptr, 100, 0, 100)
    host = rt.malloc_host(256)
    assert acl.rt.memcpy(host, 256, ptr + 100, 96, D2H) == ErrorCode.RT_PARAM_INVALID
    report, = rt.sanitizer.reports
    assert report.kind == "out-of-bounds" and report.severity == "error"
    assert report.where.startswith("96 bytes past the end of the 100-byte block at")


def test_padding_access_is_a_warning_even_when_strict(strict):
    ptr = strict.malloc(100)
    strict.memset(ptr, 160, 0, 160)
    report, = strict.sanitizer.reports
    assert report.kind == "padding-access" and report.severity == "warning"
    assert "60 bytes past the end of the 100-byte block" in report.where
    assert "WARNING: Invalid write of 160 bytes" in strict.out.getvalue()


def test_uninitialized_read(rt):
    ptr = rt.malloc(100)
    rt.memset(ptr, 100, 1, 40)
    rt.memset(ptr + 60, 40, 1, 40)
    host = rt.malloc_host(100)
    rt.memcpy(host, 100, ptr, 40, D2H)
    assert kinds(rt) == []
    rt.memcpy(host, 100, ptr, 100, D2H)
    report, = rt.sanitizer.reports
    assert report.kind == "uninitialized-read"
    assert "bytes [40, 60) of the 100-byte block" in report.where


def test_uninitialized_read_of_host_memory(rt):
    host = rt.malloc_host(64)
    dev = rt.malloc(64)
    rt.memcpy(dev, 64, host, 64, H2D)
    assert kinds(rt) == ["uninitialized-read"]


def test_initcheck_can_be_turned_off():
    rt, _ = make(initcheck=False)
    with rt:
        ptr = rt.malloc(64)
        host = rt.malloc_host(64)
        rt.memcpy(host, 64, ptr, 64, D2H)
        rt.free(ptr)
        rt.free_host(host)
        assert kinds(rt) == []


def test_readonly_write(rt):
    policy = MallocPolicy.HUGE_FIRST | MallocFlag.USER_SPACE_READONLY
    ptr = rt.malloc_with_cfg(64, policy)
    assert acl.rt.memset(ptr, 64, 1, 64) == 0
    assert kinds(rt) == ["readonly-write"]


def test_readonly_write_is_refused_when_strict(strict):
    ptr = strict.malloc_with_cfg(64, MallocFlag.USER_SPACE_READONLY)
    assert acl.rt.memset(ptr, 64, 1, 64) == ErrorCode.RT_PARAM_INVALID
    assert "readonly-write" in acl.get_recent_err_msg()


def test_free_with_pending_work_refused_when_strict(strict):
    stream = strict.streams.create_stream()
    ptr = strict.malloc(64)
    strict.memset_async(ptr, 64, 1, 64, stream)
    with pytest.raises(SanitizerError) as info:
        strict.free(ptr)
    assert info.value.report.kind == "free-with-pending-work"
    assert strict.block(ptr) is not None
    strict.streams.synchronize_stream(stream)
    strict.free(ptr)


def test_strict_failure_changes_nothing(strict):
    ptr = strict.malloc(64)
    host = strict.malloc_host(64)
    strict.memset(host, 64, 5, 64)
    with pytest.raises(SanitizerError) as info:
        strict.memcpy(host, 64, ptr, 64, D2H)
    assert info.value.code == ErrorCode.RT_PARAM_INVALID
    assert acl.util.ptr_to_bytes(host, 64) == b"\x05" * 64


# -- leaks ----------------------------------------------------------------------------------------

def test_leak_at_reset_device_with_the_allocation_site(rt):
    allocate_here(rt, 100)
    rt.reset_device(0)
    report, = rt.sanitizer.reports
    assert report.kind == "leak" and report.call == "aclrtResetDevice" and report.size == 100
    assert "allocate_here" in site_names(report.alloc_site)
    assert "Leaked 100 bytes" in rt.out.getvalue()


def test_leaks_at_finalize_include_host_memory(tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"hbm_bytes": 64 * MiB,
                                             "sanitizer": {"mode": "report", "output": None}}}))
    assert acl.init(str(config)) == 0
    from ascend_memsim import current_runtime

    rt = current_runtime()
    acl.rt.set_device(0)
    acl.rt.malloc(64, 0)
    acl.rt.malloc_host(64)
    assert acl.finalize() == 0
    assert [r.kind for r in rt.sanitizer.reports] == ["leak", "leak"]
    assert [r.call for r in rt.sanitizer.reports] == ["aclFinalize", "aclFinalize"]


# -- modes, summary, configuration -----------------------------------------------------------------

def test_off_reports_nothing_and_still_refuses_what_the_runtime_refuses():
    rt, out = make("off")
    with rt:
        ptr = rt.malloc(100)
        rt.free(ptr)
        assert acl.rt.free(ptr) == ErrorCode.RT_PARAM_INVALID
        host = rt.malloc_host(64)
        assert acl.rt.memcpy(host, 64, ptr, 64, D2H) == ErrorCode.RT_PARAM_INVALID
        rt.malloc(64)
    assert rt.sanitizer.reports == [] and out.getvalue() == ""


def test_summary_counts_errors_and_warnings(rt):
    ptr = rt.malloc(100)
    rt.memset(ptr, 160, 0, 160)
    rt.free(ptr)
    acl.rt.free(ptr)
    assert rt.sanitizer.summary() == (
        "ERROR SUMMARY: 1 error, 1 warning (double-free: 1, padding-access: 1)")
    assert rt.sanitizer.counts()["double-free"] == 1
    assert len(rt.sanitizer.clear()) == 2 and rt.sanitizer.reports == []


def test_each_kind_has_a_severity():
    assert set(KINDS.values()) == {"error", "warning", "note"}
    assert len(KINDS) == 16  # with media-overflow (acl.media) and ipc-close-order (IPC)


@pytest.mark.parametrize("spec, mode", [("strict", "strict"), ("off", "off"), (None, "report"),
                                        ({"mode": "strict"}, "strict"), (False, "off")])
def test_runtime_takes_a_mode_or_options(spec, mode):
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=spec) as rt:
        assert rt.sanitizer.mode == mode


def test_acl_init_config_selects_the_mode(tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"hbm_bytes": 64 * MiB, "sanitizer": "strict"}}))
    assert acl.init(str(config)) == 0
    from ascend_memsim import current_runtime

    assert current_runtime().sanitizer.mode == "strict"
    assert acl.finalize() == 0
    config.write_text(json.dumps({"memsim": {"sanitizer": "loud"}}))
    assert acl.init(str(config)) == ErrorCode.INVALID_PARAM
    config.write_text(json.dumps({"memsim": {"sanitizer": {"colour": 1}}}))
    assert acl.init(str(config)) == ErrorCode.INVALID_PARAM


def test_default_output_is_stderr(capsys):
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        rt.set_device(0)
        ptr = rt.malloc(64)
        rt.free(ptr)
        acl.rt.free(ptr)
    assert "[double-free]" in capsys.readouterr().err


def test_a_dropped_host_buffer_is_a_use_after_free(rt):
    buf = bytes(64)
    ptr = acl.util.bytes_to_ptr(buf)
    dev = rt.malloc(64)
    rt.memset(dev, 64, 1, 64)
    del buf
    assert acl.rt.memcpy(ptr, 64, dev, 64, D2H) == ErrorCode.RT_PARAM_INVALID
    report, = rt.sanitizer.reports
    assert report.kind == "use-after-free"
    assert "registered host buffer" in report.where and "no longer holds" in report.where


def test_leak_reports_can_be_turned_off():
    rt, _ = make(leaks=False)
    with rt:
        rt.malloc(64)
        rt.malloc_host(64)
    assert kinds(rt) == []


def test_sanitizer_error_is_an_exported_error_class():
    from ascend_memsim.memory import errors

    assert SanitizerError in errors.error_classes()
    assert "SanitizerError" in errors.__all__
    assert SanitizerError("x").code == ErrorCode.RT_PARAM_INVALID


def test_print_limit_caps_the_printed_reports_but_keeps_them_all():
    import io

    from ascend_memsim import MiB, Runtime, Sanitizer

    out = io.StringIO()
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=out, print_limit=3)) as rt:
        rt.set_device(0)
        for _ in range(5):
            rt.malloc(100)
    assert len(rt.sanitizer.reports) == 5
    assert out.getvalue().count("[leak]") == 3
    assert "print limit of 3 reports reached" in out.getvalue()


# -- review fixes: pointer types, the quarantine, host frees, messages, the freed index -----------

def test_a_numpy_integer_pointer_gets_the_same_checks_as_an_int():
    np = pytest.importorskip("numpy", reason="numpy is an optional extra")
    rt, _ = make(quarantine_bytes=1 * MiB)
    with rt:
        ptr = rt.malloc(100)
        rt.memset_async(ptr, 100, 1, 100)
        assert acl.rt.free(np.uint64(ptr)) == 0
        assert acl.rt.free(np.uint64(ptr)) == ErrorCode.RT_PARAM_INVALID
        assert acl.rt.synchronize_device() == ErrorCode.RT_PARAM_INVALID
        assert kinds(rt) == ["free-with-pending-work", "double-free", "use-after-free"]
        for bad in ("ptr", 1.5, None, True, np.float64(3.0)):
            assert acl.rt.free(bad) == ErrorCode.INVALID_PARAM
            assert acl.rt.free_with_dev_sync(bad) == ErrorCode.INVALID_PARAM
        assert acl.rt.free(np.uint64(0)) == ErrorCode.INVALID_PARAM
        assert len(rt.sanitizer.reports) == 3


def test_a_numpy_integer_pointer_with_pending_work_is_refused_when_strict(strict):
    np = pytest.importorskip("numpy", reason="numpy is an optional extra")
    ptr = strict.malloc(64)
    strict.memset_async(ptr, 64, 1, 64)
    assert acl.rt.free(np.int64(ptr)) == ErrorCode.RT_PARAM_INVALID
    assert strict.block(ptr) is not None and kinds(strict) == ["free-with-pending-work"]


def test_a_quarantined_block_is_no_longer_live_but_its_memory_stays_held():
    rt, _ = make(quarantine_bytes=1 * MiB)
    with rt:
        free_before, total = rt.get_mem_info(1)
        device = rt.device(0)
        ptr = rt.malloc(100)
        keep = rt.malloc(100)
        rt.free(ptr)
        assert rt.check_mem_type([ptr], 0x2) == 0
        assert rt.block(ptr) is None and rt.block_at(ptr + 8) is None
        assert [b.ptr for b in rt.blocks()] == [keep]
        assert rt.get_mem_usage_info(0, 5)[0].cur_mem_size == 192
        # Held memory is free for the program (SPEC 5: free + live footprints == total) ...
        assert rt.get_mem_info(1) == (free_before - 192, total)
        assert rt.get_mem_info(acl.ACL_HBM_MEM_HUGE)[0] == rt.get_mem_info(1)[0] // (
            2 * MiB) * 2 * MiB
        device.check_invariants()
        # ... and emptying the quarantine does not change the figures.
        assert rt.sanitizer.flush_quarantine() == 1
        assert rt.get_mem_info(1) == (free_before - 192, total)
        device.check_invariants()
        rt.free(keep)
    assert kinds(rt) == []


def test_quarantined_blocks_are_neither_leaks_nor_kept_across_a_reset():
    rt, _ = make(quarantine_bytes=1 * MiB)
    with rt:
        ptr = rt.malloc(100)
        rt.free(ptr)
        rt.reset_device(0)
        rt.set_device(0)
        assert rt.get_mem_info(1)[0] == 64 * MiB
        rt.device(0).check_invariants()
        assert rt.sanitizer.flush_quarantine() == 0
    assert kinds(rt) == []


def test_free_host_with_pending_work_is_reported(rt):
    dev = rt.malloc(100)
    host = rt.malloc_host(100)
    rt.memset(host, 100, 3, 100)
    rt.memcpy_async(dev, 100, host, 100, H2D)
    rt.free_host(host)
    report = rt.sanitizer.reports[0]
    assert report.kind == "free-with-pending-work" and report.call == "aclrtFreeHost"
    assert "host block" in report.where and "aclrtMemcpyAsync" in report.where


def test_free_host_with_pending_work_is_refused_when_strict(strict):
    dev = strict.malloc(100)
    host = strict.malloc_host(100)
    strict.memset(host, 100, 3, 100)
    strict.memcpy_async(dev, 100, host, 100, H2D)
    assert acl.rt.free_host(host) == ErrorCode.RT_PARAM_INVALID
    assert kinds(strict) == ["free-with-pending-work"]
    assert strict.host.region_at(host).ptr == host
    assert acl.rt.synchronize_device() == 0
    assert acl.rt.free_host(host) == 0
    assert kinds(strict) == ["free-with-pending-work"]


def test_messages_say_one_byte_not_one_bytes(rt):
    ptr = rt.malloc(100)
    assert acl.rt.memset(ptr, 193, 0, 193) == ErrorCode.RT_PARAM_INVALID
    report, = rt.sanitizer.reports
    assert "1 byte past its 192-byte footprint" in report.where
    host = rt.malloc_host(64)
    assert acl.rt.memcpy(host, 1, ptr + 193, 1, D2H) == ErrorCode.RT_PARAM_INVALID
    assert "Invalid read of 1 byte at" in rt.sanitizer.reports[1].format()


def test_the_error_message_and_the_report_say_the_same_overrun(rt):
    """get_recent_err_msg said "runs 1 bytes past the end" (past the footprint) where the
    report said "93 bytes past the end" (past the size): one computation, one wording now."""
    ptr = rt.malloc(100)
    assert acl.rt.memset(ptr, 193, 0, 193) == ErrorCode.RT_PARAM_INVALID
    report, = rt.sanitizer.reports
    said = ("93 bytes past the end of the 100-byte block at "
            f"{ptr:#x} (aclrtMalloc, normal pages, HBM, footprint 192), 1 byte past its "
            "192-byte footprint")
    assert report.where == said
    assert said in acl.get_recent_err_msg()


def test_a_copy_whose_kind_contradicts_its_pointers_is_reported(rt):
    """A host-to-device copy passed as DEVICE_TO_HOST (a ModelZoo script does it): the
    runtime copies by address, so the copy happens, and the sanitizer warns with both
    pointers' kinds (no report before)."""
    ptr = rt.malloc(64)
    host = rt.malloc_host(64)
    ctypes.memset(host, 7, 64)
    assert acl.rt.memcpy(ptr, 64, host, 64, D2H) == 0
    back = rt.malloc_host(64)
    assert acl.rt.memcpy(back, 64, ptr, 64, D2H) == 0
    assert ctypes.string_at(back, 64) == b"\x07" * 64
    report, = rt.sanitizer.reports
    assert (report.kind, report.severity, report.call) == (
        "wrong-memcpy-kind", "warning", "aclrtMemcpy")
    assert "kind DEVICE_TO_HOST (2)" in report.where
    assert f"src {host:#x} is host memory" in report.where
    assert f"dst {ptr:#x} is device memory" in report.where
    assert "make HOST_TO_DEVICE (1)" in report.where
    assert "[wrong-memcpy-kind]" in report.format()
    # the right kind, DEFAULT, or a device-to-device copy with its kind: nothing to say
    other = rt.malloc(64)
    assert acl.rt.memcpy(ptr, 64, host, 64, 1) == 0
    assert acl.rt.memcpy(ptr, 64, host, 64, 4) == 0
    assert acl.rt.memcpy(other, 64, ptr, 64, 3) == 0
    assert acl.rt.memcpy(host, 64, other, 64, D2H) == 0
    assert len(rt.sanitizer.reports) == 1
    # device to device passed as HOST_TO_HOST, and the same through a stream
    assert acl.rt.memcpy(other, 64, ptr, 64, 0) == 0
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy_async(host, 64, ptr, 64, 1, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert [(r.kind, r.call) for r in rt.sanitizer.reports[1:]] == [
        ("wrong-memcpy-kind", "aclrtMemcpy"), ("wrong-memcpy-kind", "aclrtMemcpyAsync")]
    assert acl.rt.destroy_stream(stream) == 0


def test_a_wrong_kind_is_a_warning_even_when_strict(strict):
    """A warning: the runtime copies it, so strict mode does not fail the call."""
    ptr, host = strict.malloc(64), strict.malloc_host(64)
    strict.memset(ptr, 64, 0, 64)
    assert acl.rt.memcpy(host, 64, ptr, 64, H2D) == 0
    assert [r.kind for r in strict.sanitizer.reports] == ["wrong-memcpy-kind"]


def test_padding_access_tells_rule_padding_from_page_rounding(rt):
    ptr = rt.malloc(2 * MiB)  # HUGE_FIRST: rule size 2 MiB + 32, footprint 4 MiB
    block = rt.block(ptr)
    assert block.padding == 32 and block.page_rounding == 2 * MiB - 32
    rt.memset(ptr + 2 * MiB, 32, 0, 32)
    rt.memset(ptr + 3 * MiB, 16, 0, 16)
    rule, page = rt.sanitizer.reports
    assert "the hidden padding that the rounding rule adds" in rule.where
    assert "page rounding" in page.where and "rounding rule adds" not in page.where


def test_use_after_free_names_the_newest_freed_block_at_an_address(rt):
    sanitizer = rt.sanitizer
    old = rt.malloc(4096, MallocPolicy.NORMAL_ONLY)
    footprint = rt.block(old).footprint
    rt.free(old)
    assert rt.malloc(64, MallocPolicy.NORMAL_ONLY) == old
    new = rt.malloc(100, MallocPolicy.NORMAL_ONLY)
    assert new == old + 128
    rt.free(new)
    assert sanitizer._freed_at(new + 8).block.size == 100
    assert sanitizer._freed_at(old + 8).block.size == 4096
    assert sanitizer._freed_at(new + 1000).block.size == 4096
    assert sanitizer._freed_at(old + footprint - 1).block.size == 4096
    assert sanitizer._freed_at(old + footprint) is None
    # Many frees with no lookup in between: the index is rebuilt, the history still holds.
    small = Sanitizer("report", output=None, history=8)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=small) as other:
        other.set_device(0)
        ptrs = [other.malloc(64, MallocPolicy.NORMAL_ONLY) for _ in range(30)]
        for p in ptrs:
            other.free(p)
        assert small._freed_at(ptrs[0]) is None
        assert small._freed_at(ptrs[-1] + 5).block.ptr == ptrs[-1]
        assert [small._freed_at(p) is not None for p in ptrs] == [False] * 22 + [True] * 8


def test_a_failed_malloc_with_a_quarantine_leaves_the_figures():
    with Runtime("A2", hbm_bytes=64 * MiB,
                 sanitizer={"quarantine_bytes": 64 * MiB, "output": None}) as rt:
        rt.set_device(0)
        rt.free(rt.malloc(10 * MiB, 2))
        before = [rt.get_mem_info(attr) for attr in range(18)]
        assert before[1] == (64 * MiB, 64 * MiB)  # the held block counts as free
        assert acl.rt.malloc(100 * MiB, 2) == (0, acl.ACL_ERROR_RT_MEMORY_ALLOCATION)
        assert [rt.get_mem_info(attr) for attr in range(18)] == before
        rt.device(0).check_invariants()


def test_the_nearest_block_is_looked_for_in_the_memory_the_address_points_into():
    out = io.StringIO()
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": out}) as rt:
        rt.set_device(0)
        host = acl.rt.malloc_host(100)[0]
        assert acl.rt.free(12345) == acl.ACL_ERROR_RT_PARAM_INVALID
        assert "host block" not in out.getvalue()
        dev = rt.malloc(100)
        assert acl.rt.free(dev + 300) == acl.ACL_ERROR_RT_PARAM_INVALID
        assert "past the end of the 100-byte block" in out.getvalue()
        rt.free(dev)
        acl.rt.free_host(host)


@settings(max_examples=40)
@given(st.lists(st.tuples(st.booleans(),
                          st.sampled_from([100, 3 * MiB, 700 * MiB, 1024 * MiB, 1500 * MiB]),
                          st.sampled_from([0, 1, 2, 6])), max_size=12))
@example([(False, 1024 * MiB, 6), (True, 0, 0), (False, 100, 6)])
@example([(False, 100, 6), (True, 100, 0), (False, 1024 * MiB, 0), (False, 1500 * MiB, 6)])
def test_no_malloc_fails_or_falls_back_while_memory_is_quarantined(program):
    """The quarantine moves addresses (its purpose), but it gives its memory back before a
    malloc would fail or fall back to normal pages for want of it. A malloc that fails even
    with the quarantine given back leaves the quarantine as it was (issue 9: it used to empty
    it, so the next malloc reused a stale pointer's address)."""
    with Runtime("A2", hbm_bytes=4 * 1024 * MiB,
                 sanitizer={"quarantine_bytes": 8 * 1024 * MiB, "output": None,
                            "leaks": False}) as rt:
        rt.set_device(0)
        device = rt.device(0)
        live = []
        for free_one, size, policy in program:
            if free_one and live:
                assert acl.rt.free(live.pop(0)) == 0
                continue
            held = device.held()
            ptr, ret = acl.rt.malloc(size, policy)
            if ret:
                assert device.held() == held, "a failed malloc changed the quarantine"
                # ... and it failed for want of memory the quarantine did not hold
                rt.sanitizer.flush_quarantine()
                assert acl.rt.malloc(size, policy) == (0, ret)
            elif rt.block(ptr).fallback:
                assert device.held() == [], "fell back with memory in quarantine"
            if not ret:
                live.append(ptr)
            device.check_invariants()
        for ptr in live:
            acl.rt.free(ptr)


@pytest.mark.parametrize("failure", ["too big", "injected"])
def test_a_failed_malloc_leaves_the_quarantine_as_it_was(failure):
    """Issue 9: a malloc that failed (or an injected failure) released the quarantined blocks,
    so the next malloc returned a stale pointer's address."""
    with Runtime("A2", hbm_bytes=64 * MiB,
                 sanitizer={"quarantine_bytes": 64 * MiB, "output": None}) as rt:
        rt.set_device(0)
        device = rt.device(0)
        stale = rt.malloc(40 * MiB, 2)
        rt.free(stale)
        held = device.held()
        before = [rt.get_mem_info(attr) for attr in range(18)]
        if failure == "too big":
            # 40 MiB held, 24 MiB free: does not fit even with the quarantine given back
            assert acl.rt.malloc(65 * MiB, 2)[1] == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
        else:
            # would fit only with the quarantine given back; the injected failure comes first
            with FailNth(1).installed(rt):
                assert acl.rt.malloc(30 * MiB, 2)[1] == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
        assert device.held() == held
        assert [rt.get_mem_info(attr) for attr in range(18)] == before
        device.check_invariants()
        fresh = rt.malloc(100)
        assert fresh != stale
        rt.free(fresh)


def _acl_alloc_here(size):
    return acl.rt.malloc(size, MallocPolicy.NORMAL_ONLY)[0]


def _acl_free_here(ptr):
    assert acl.rt.free(ptr) == 0


def _free_synced_here(rt, ptr):
    rt.free_with_dev_sync(ptr)


@pytest.mark.parametrize("via", ["acl", "runtime", "free_with_dev_sync"])
def test_sites_start_at_the_callers_frame_on_every_path(rt, via):
    # The captures jump over the simulator's frames they know of: what is left must be the
    # user's frames, innermost the function that called malloc / free, on every path.
    if via == "acl":
        ptr = _acl_alloc_here(100)
        _acl_free_here(ptr)
        alloc, free = "_acl_alloc_here", "_acl_free_here"
    else:
        ptr = allocate_here(rt)
        if via == "runtime":
            free_here(rt, ptr)
            alloc, free = "allocate_here", "free_here"
        else:
            _free_synced_here(rt, ptr)
            alloc, free = "allocate_here", "_free_synced_here"
    assert acl.rt.free(ptr) == ErrorCode.RT_PARAM_INVALID
    report, = rt.sanitizer.reports
    assert site_names(report.alloc_site)[-2:] == [
        "test_sites_start_at_the_callers_frame_on_every_path", alloc]
    assert site_names(report.free_site)[-2:] == [
        "test_sites_start_at_the_callers_frame_on_every_path", free]
    assert not any(f.filename.startswith(_PACKAGE) for site in (report.alloc_site,
                   report.free_site) for f in site)
