"""torch_npu's memory API beyond the statistics, during an estimate: memory pools
(``MemPool``, ``use_mem_pool``), the accumulated statistics' reset and the host allocator's
statistics. Figures by hand: a tensor's block is its bytes + 32 rounded up to 512; the
large pool's segments are 20 MiB for requests up to 10 MiB; pinned blocks are powers of
two (torch's caching host allocator)."""

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from test_torchsim_host import _run  # noqa: E402

from ascend_memsim.torchsim import estimate  # noqa: E402

MiB = 1 << 20


def test_a_mem_pool_keeps_its_tensors_segments_apart_and_gives_them_back():
    def script(out):
        import torch_npu
        memory = torch_npu.npu.memory
        x = torch.empty(MiB, device="npu")                       # 4 MiB: a 20 MiB segment
        del x                                                    # cached, free
        pool = memory.MemPool()
        out["id"], out["count"] = pool.id, pool.use_count()
        with memory.use_mem_pool(pool):
            out["count_inside"] = pool.use_count()
            y = torch.empty(MiB, device="npu")                   # not the cached segment
        out["reserved_with_pool"] = torch.npu.memory_reserved()
        out["pool_segments"] = [s["total_size"] for s in pool.snapshot()]
        out["pool_ids"] = {s["segment_pool_id"] for s in memory.memory_snapshot()}
        del y
        torch.npu.empty_cache()                                  # the pool is still alive
        out["reserved_pool_alive"] = torch.npu.memory_reserved()
        del pool                                                 # ~MemPool: released, emptied
        out["reserved_after"] = torch.npu.memory_reserved()

    out, result = _run(script)
    assert out["id"] == (0, 1) and (out["count"], out["count_inside"]) == (1, 2)
    assert out["reserved_with_pool"] == 40 * MiB and out["pool_segments"] == [20 * MiB]
    assert out["pool_ids"] == {(0, 0), (0, 1)}
    # empty_cache frees the device's free segment, not the live pool's
    assert out["reserved_pool_alive"] == 20 * MiB
    assert out["reserved_after"] == 0
    assert result.peak_reserved == 40 * MiB


def test_reset_accumulated_memory_stats_and_the_host_allocators_statistics():
    def script(out):
        import torch_npu
        memory = torch_npu.npu.memory
        a = torch.empty(MiB, device="npu")
        b = torch.empty(MiB, device="npu")
        del a
        memory.reset_accumulated_memory_stats()
        stats = torch.npu.memory_stats()
        out["after_reset"] = (stats["allocated_bytes.all.allocated"],
                              stats["allocated_bytes.all.freed"],
                              stats["allocated_bytes.all.current"])
        del b
        out["freed"] = torch.npu.memory_stats()["allocated_bytes.all.freed"]
        # 3,000 bytes pinned: a 4,096-byte block; 5,000: 8,192
        p = torch.empty(750).pin_memory()
        q = torch.empty(1250).pin_memory()
        del p
        r = torch.empty(700).pin_memory()                        # the free 4 KiB block again
        out["host"] = dict(memory.host_memory_stats())
        del q, r
        memory.host_empty_cache()
        out["host_after"] = dict(memory.host_memory_stats())

    out, result = _run(script)
    block = 4 * MiB + 512
    assert out["after_reset"] == (0, 0, block)
    assert out["freed"] == block
    host = out["host"]
    assert host["allocated_bytes.current"] == 4096 + 8192 and host["num_host_alloc"] == 2
    assert host["active_bytes.current"] == 4096 + 8192 and host["active_requests.current"] == 2
    assert host["allocations.current"] == 2 and host["active_requests.allocated"] == 3
    after = out["host_after"]
    assert after["allocated_bytes.current"] == 0 and after["num_host_free"] == 2
    assert after["allocated_bytes.freed"] == 4096 + 8192
    # the report's pinned figure is the blocks the host allocator held at its peak
    assert result.host_pinned_peak == 4096 + 8192


def test_a_custom_allocator_in_place_of_the_caching_one_stops_the_run_at_its_line(tmp_path):
    so = tmp_path / "alloc.so"
    so.write_bytes(b"\x7fELF")
    script = tmp_path / "custom.py"
    script.write_text(
        "import torch, torch_npu\n"
        f"a = torch_npu.npu.memory.NPUPluggableAllocator({str(so)!r}, 'my_malloc', 'my_free')\n"
        "torch_npu.npu.memory.change_current_allocator(a)\n"
        "x = torch.empty(10, device='npu')\n")
    result = estimate(str(script), product="A2")
    assert result.status != 0 and result.stopped
    assert "custom.py:3" in result.stopped and "change_current_allocator" in result.stopped
    missing = tmp_path / "missing.py"
    missing.write_text("import torch_npu\n"
                       "torch_npu.npu.memory.NPUPluggableAllocator('/nonexistent.so', 'a', 'b')\n")
    # the script's own error, as ctypes.CDLL gives it on the machine
    with pytest.raises(OSError, match="cannot open shared object file"):
        estimate(str(missing), product="A2")
