"""Statistics: checked against the accounting identity and the live blocks."""

from hypothesis import given
from hypothesis import strategies as st

from ascend_memsim import MemAttr, MiB, OutOfDeviceMemory, Runtime
from ascend_memsim.observe.stats import MemoryStats


def _check_identity(rt, stats):
    snap = stats.snapshot(0)
    free, total = rt.get_mem_info(MemAttr.HBM_MEM)
    blocks = rt.blocks()
    assert free + snap["footprint_bytes.all.current"] == total
    assert snap["footprint_bytes.all.current"] == sum(b.footprint for b in blocks)
    assert snap["requested_bytes.all.current"] == sum(b.size for b in blocks)
    assert snap["allocation.all.current"] == len(blocks)
    for stat in ("allocation", "footprint_bytes", "requested_bytes"):
        assert (snap[f"{stat}.all.allocated"] - snap[f"{stat}.all.freed"]
                == snap[f"{stat}.all.current"])
        assert snap[f"{stat}.all.peak"] >= snap[f"{stat}.all.current"]
        by_page = sum(v for k, v in snap.items()
                      if k.startswith(f"{stat}.page.") and k.endswith(".current"))
        assert by_page == snap[f"{stat}.all.current"]
    assert snap["overhead_bytes.all.current"] == (snap["footprint_bytes.all.current"]
                                                  - snap["requested_bytes.all.current"])


ops = st.lists(st.tuples(st.sampled_from(["malloc", "malloc", "free"]),
                         st.sampled_from([1, 100, 1 << 20, (1 << 20) + 1, 2 << 20, 5 << 20]),
                         st.sampled_from([0, 1, 2])), max_size=40)


@given(ops)
def test_stats_agree_with_get_mem_info(sequence):
    with Runtime("A2", hbm_bytes=32 * MiB) as rt:
        stats = MemoryStats.attach(rt)
        rt.set_device(0)
        live = []
        ooms = fallbacks = 0
        for op, size, policy in sequence:
            if op == "free" and live:
                rt.free(live.pop(size % len(live)))
            elif op == "malloc":
                try:
                    live.append(rt.malloc(size, policy))
                except OutOfDeviceMemory:
                    ooms += 1
                else:
                    fallbacks += rt.block(live[-1]).fallback
            _check_identity(rt, stats)
        snap = stats.snapshot(0)
        assert snap["num_ooms"] == ooms
        assert snap["num_fallbacks"] == fallbacks


def test_pools_by_page_component_and_memory(a2):
    stats = MemoryStats.attach(a2)
    a2.malloc(2 * MiB)                              # huge, APP
    a2.malloc_with_cfg(100, 2, {1: 3})              # normal, module 3
    snap = stats.snapshot(0)
    assert snap["footprint_bytes.page.huge.current"] == 4 * MiB
    # aclrtMallocWithCfg rounds to 32 with no +32 (memory.cpp aclrtMallocInnerWithCfg)
    assert snap["footprint_bytes.page.normal.current"] == 128
    assert snap["requested_bytes.memory.HBM.current"] == 2 * MiB + 100
    components = {k for k in snap if k.startswith("allocation.component.")}
    assert any(".APP." in k for k in components) and len(components) == 2 * 4
    # padding and page rounding of the 2 MiB request: 2 MiB; of the 100-byte one: 28
    assert snap["overhead_bytes.all.current"] == 2 * MiB + 28


def test_fallback_and_oom_counts_and_reset_peak(a2):
    stats = MemoryStats.attach(a2)
    fillers = []
    while True:
        try:
            fillers.append(a2.malloc(1 * MiB, 2))
        except OutOfDeviceMemory:
            break
    for ptr in fillers[::2]:
        a2.free(ptr)
    assert a2.block(a2.malloc(1 * MiB + 1, 0)).fallback
    try:
        a2.malloc(1 * MiB + 1, 1)
    except OutOfDeviceMemory:
        pass
    snap = stats.snapshot(0)
    assert snap["num_fallbacks"] == 1 and snap["num_ooms"] == 2
    assert snap["footprint_bytes.all.peak"] > snap["footprint_bytes.all.current"]
    stats.reset_peak()
    snap = stats.snapshot(0)
    assert snap["footprint_bytes.all.peak"] == snap["footprint_bytes.all.current"]
    assert "huge-page fallbacks: 1" in stats.summary(0)


def test_reset_counts_live_blocks_as_freed():
    with Runtime("A2", hbm_bytes=16 * MiB) as rt:
        stats = MemoryStats.attach(rt)
        rt.set_device(0)
        rt.malloc(100)
        rt.malloc(3 * MiB)
        rt.reset_device(0)
        snap = stats.snapshot(0)
        assert snap["footprint_bytes.all.current"] == 0
        assert snap["num_resets"] == 1 and snap["reset_blocks"] == 2
        assert snap["allocation.all.freed"] == 2


def test_unknown_events_are_ignored_and_empty_snapshot_is_zero(a2):
    stats = MemoryStats.attach(a2)
    stats("memcpy", a2.device(0), {"dst": 1, "src": 2, "count": 3, "kind": 1, "stream": None})
    assert stats.snapshot(0)["allocation.all.allocated"] == 0
    assert stats.snapshot(5)["footprint_bytes.all.current"] == 0


def test_an_observer_of_some_events_sees_only_those_on_devices_made_before_and_after():
    seen, everything = [], []
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2) as rt:
        rt.set_device(0)
        rt.add_observer(lambda event, device, info: seen.append((event, device.device_id)),
                        events=("free", "reset", "set_device"))
        rt.add_observer(lambda event, device, info: everything.append(event))
        rt.free(rt.malloc(100))
        rt.set_device(1)
        ptr = rt.malloc(100)
        rt.reset_device(1)
        assert ptr not in {b.ptr for b in rt.blocks()}
    assert seen[:3] == [("free", 0), ("set_device", 1), ("reset", 1)]  # then close resets
    assert everything[:4] == ["malloc", "free", "set_device", "malloc"]
    assert "reset" in everything and "reset_device" in everything


def test_an_observer_removed_from_its_events_sees_nothing_more():
    seen = []

    def watch(event, device, info):
        seen.append(event)

    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        rt.add_observer(watch, events=("malloc",))
        rt.set_device(0)
        rt.free(rt.malloc(100))
        rt.remove_observer(watch, events=("malloc",))
        rt.free(rt.malloc(100))
        assert not rt.device(0).subscribers
    assert seen == ["malloc"]
