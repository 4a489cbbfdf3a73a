"""Memory shared between processes (11-04 shareable handles, 11-07 IPC) and stream-ordered
pools (11-10) as traces, replay, statistics and pictures see them."""

import io
import json

import pytest

from ascend_memsim import MiB, Runtime, acl
from ascend_memsim.cli import main
from ascend_memsim.observe.player import player_data, player_html
from ascend_memsim.observe.replay import replay, smallest_capacity
from ascend_memsim.observe.sharedmap import PoolGranule, SharingView
from ascend_memsim.observe.stats import MemoryStats
from ascend_memsim.observe.stream import open_trace
from ascend_memsim.observe.trace import Recorder, loads
from ascend_memsim.observe.viz import MapSnapshot, map_svg, text_map

G = 2 * MiB
NO_PID_CHECK = 1


def _pool_props(max_size=16 * MiB):
    return {"allocType": 0, "handleType": 0, "location": {"id": 0, "type": 1},
            "maxSize": max_size}


def _physical_prop():
    return {"handleType": 0, "allocationType": 0, "memAttr": acl.ACL_HBM_MEM_HUGE,
            "location": {"id": 0, "type": acl.ACL_MEM_LOCATION_TYPE_DEVICE}, "reserve": 0}


def _sharing_keys(snapshot):
    return {k: v for k, v in snapshot.items()
            if k.startswith(("num_ipc", "num_shareable", "imported_bytes"))
            or ".mem_pool." in k or ".physical." in k}


@pytest.fixture
def recorded():
    """Process A exports a block by IPC key and a physical handle by shareable handle and
    uses a pool; process B imports both. Each process's trace, its live statistics, and
    what it looked like at its busiest."""
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None}) as a:
        b = a.spawn_process(sanitizer={"output": None})
        rec_a, rec_b = Recorder(a), Recorder(b)
        stats_a, stats_b = MemoryStats.attach(a), MemoryStats.attach(b)
        rec_a.start()
        rec_b.start()
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(4096, 0)
        key, _ = acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, NO_PID_CHECK)
        handle, _ = acl.rt.malloc_physical(G, _physical_prop(), 0)
        shared, ret = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
        assert ret == 0
        pool, _ = acl.rt.mem_pool_create(_pool_props())
        stream, _ = acl.rt.create_stream()
        block, _ = acl.rt.mem_pool_malloc_async(3 * MiB, pool, stream)
        with b.as_current():
            acl.rt.set_device(0)
            _mine, ret = acl.rt.ipc_mem_import_by_key(key, 0)
            assert ret == 0
            imported, ret = acl.rt.mem_import_from_shareable_handle(shared, 0)
            assert ret == 0
            assert acl.rt.ipc_mem_close(key) == 0
            assert acl.rt.free_physical(imported) == 0
        acl.rt.mem_pool_free_async(block, stream)
        acl.rt.synchronize_stream(stream)
        acl.rt.ipc_mem_close(key)
        acl.rt.free(ptr)
        acl.rt.free_physical(handle)
        acl.rt.mem_pool_destroy(pool)
        rec_a.stop()
        rec_b.stop()
        yield {"a": (rec_a.trace, stats_a.snapshot(0)), "b": (rec_b.trace, stats_b.snapshot(0))}
        b.close()


def test_each_call_leaves_an_event_with_what_replay_and_pictures_read(recorded):
    events_a = recorded["a"][0].events
    by_kind = {}
    for event in events_a + recorded["b"][0].events:
        by_kind.setdefault(event["event"], []).append(event)
    assert {"key", "ptr", "size"} <= set(by_kind["ipc_export"][0])
    assert {"key", "ptr", "size", "exporter", "memory_device"} <= set(by_kind["ipc_import"][0])
    assert {"key", "ptr", "size", "role"} <= set(by_kind["ipc_close"][0])
    assert {"handle", "size", "footprint", "shareable"} <= set(by_kind["shareable_export"][0])
    assert {"handle", "size", "footprint", "shareable", "exporter",
            "memory_device"} <= set(by_kind["shareable_import"][0])
    assert {"handle", "size", "footprint"} <= set(by_kind["shareable_release"][0])
    assert {"pool", "ptr", "size", "footprint", "stream"} <= set(by_kind["mem_pool_malloc"][0])
    assert {"pool", "ptr", "size", "footprint", "stream"} <= set(by_kind["mem_pool_free"][0])
    # a pool's granules: where they lie in the heap and where they are mapped in the pool
    granules = [e for e in by_kind["malloc_physical"] if "pool" in e]
    assert len(granules) == 2 and all({"phys", "va"} <= set(e) for e in granules)
    block = by_kind["mem_pool_malloc"][0]
    assert sorted(e["va"] for e in granules) == [block["ptr"], block["ptr"] + G]


@pytest.mark.parametrize("how", ["memory", "text", "file"])
def test_traces_round_trip_and_replay_as_recorded(recorded, how, tmp_path):
    for name, (trace, live) in recorded.items():
        if how == "text":
            trace = loads(trace.dumps())
        elif how == "file":
            path = tmp_path / f"{name}.jsonl"
            trace.save(str(path))
            trace = open_trace(str(path))
        stats = MemoryStats()
        result = replay(trace, "A2", capacity=64 * MiB, observers=[stats])
        assert result.problems == [] and result.fits
        assert result.skipped == {}
        # the statistics of the replay count sharing and pools as the program's did
        assert _sharing_keys(stats.snapshot(0)) == _sharing_keys(live)
        if name == "a":
            assert result.recorded == {"ipc_export": 1, "ipc_close": 1, "shareable_export": 1,
                                       "mem_pool_create": 1, "mem_pool_malloc": 1,
                                       "mem_pool_free": 1, "mem_pool_trim": 1,
                                       "mem_pool_destroy": 1}
            # the block (4 KiB + its padding), the physical handle and the pool's 2 granules
            assert result.peak_bytes == 4160 + G + 2 * G
            assert result.imported_peak == 0
        else:
            assert result.recorded == {"ipc_import": 1, "ipc_close": 1, "shareable_import": 1,
                                       "shareable_release": 1}
            # imports place no memory: B's peak is nothing; their bytes are counted apart
            assert result.peak_bytes == 0 and result.imported_peak == 4096 + G
            assert "imports peak at 2 MiB + 4 KiB" in str(result)


def test_capacity_planning_counts_pool_memory():
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
        acl.rt.set_device(0)
        pool, _ = acl.rt.mem_pool_create(_pool_props(32 * MiB))
        stream, _ = acl.rt.create_stream()
        blocks = [acl.rt.mem_pool_malloc_async(3 * MiB, pool, stream)[0] for _ in range(3)]
        for block in blocks:
            acl.rt.mem_pool_free_async(block, stream)
        acl.rt.synchronize_stream(stream)
        acl.rt.mem_pool_destroy(pool)
    # three blocks of 3 MiB take two granules each: 12 MiB of device memory
    found = smallest_capacity(rec.trace, "A2")
    assert found.capacity == 12 * MiB
    below = replay(rec.trace, "A2", capacity=10 * MiB)
    assert not below.fits
    assert below.first_failure.event["api"] == "aclrtMemPoolMallocAsync"
    timeline = replay(rec.trace, "A2", capacity=64 * MiB, timeline=True).timeline
    assert timeline.components() == ["memory pool"]


def test_a_hostile_sharing_event_is_counted_and_described_never_a_crash():
    lines = [{"format": "ascend-memsim-trace", "version": 1, "product": "A2"},
             {"event": "ipc_import", "ptr": 4096},
             {"event": "mem_pool_malloc", "pool": "the big one", "ptr": 1 << 20, "size": 1,
              "footprint": G},
             {"event": "shareable_release", "handle": [1], "size": 5},
             {"event": "ipc_close", "ptr": 4096, "size": 1 << 70, "role": "importer"}]
    trace = loads("\n".join(json.dumps(line) for line in lines))
    assert trace.problems == []
    stats = MemoryStats()
    result = replay(trace, "A2", capacity=64 * MiB, observers=[stats])
    assert result.recorded == {"ipc_import": 1, "mem_pool_malloc": 1, "shareable_release": 1,
                               "ipc_close": 1}
    assert len(result.problems) == 4 and all("counted, not drawn" in p
                                             for p in result.problems)
    assert "num_ipc_imports" not in stats.snapshot(0)
    assert result.imported_peak == 0


def _drawn(svg, text):
    """How many drawn rectangles of the SVG have ``text`` in their tag or hover text."""
    return sum(1 for part in svg.split("<rect ")[1:] if text in part.split("</rect>")[0])


def _pool_program(rt, view):
    """A 3 MiB pool block and a 1 MiB one given back (its granule cached); the map then."""
    acl.rt.set_device(0)
    pool, _ = acl.rt.mem_pool_create(_pool_props())
    stream, _ = acl.rt.create_stream()
    big, _ = acl.rt.mem_pool_malloc_async(3 * MiB, pool, stream)
    small, _ = acl.rt.mem_pool_malloc_async(MiB, pool, stream)
    acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, 16 * MiB)
    acl.rt.mem_pool_free_async(small, stream)
    acl.rt.synchronize_stream(stream)
    return big, MapSnapshot.of(rt.device(0), sharing=view)


def test_pool_blocks_are_drawn_inside_their_granules():
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
        view = SharingView.attach(rt)
        big, snapshot = _pool_program(rt, view)
    granules = [b for b in snapshot.blocks if isinstance(b, PoolGranule)]
    assert [(g.block, g.size) for g in granules] == [(big, G), (big, MiB), (0, G)]
    assert snapshot.counted == "0 blocks and 3 pool granules"
    svg = map_svg(snapshot)
    # the block's two granules, its rounding in the second, and the cached one
    assert _drawn(svg, f"of the {3 * MiB}-byte block at {big:#x}") == 3
    assert _drawn(svg, "cached (its block was given back") == 1
    assert "memory pool block" in svg and "memory pool, cached" in svg
    # at 2 MiB a character the three granules are a character each, side by side: the
    # second and the third start after one drawn alike (|)
    assert text_map(snapshot, cell=2 * MiB).splitlines()[1].startswith("+0 MiB      M||.")
    # the same picture from the recorded trace, replayed
    replayed_view = SharingView()
    result = replay(rec.trace, "A2", capacity=64 * MiB, keep_runtime=True,
                    observers=[replayed_view])
    try:
        again = MapSnapshot.of(result.runtime.device(0), sharing=replayed_view)
    finally:
        result.runtime.close()
    assert [(g.size, g.asked) for g in again.blocks] == [(g.size, g.asked) for g in granules]
    assert _drawn(map_svg(again), f"of the {3 * MiB}-byte block") == 3


def test_imports_are_drawn_in_the_importers_map_with_the_exporters_pid(recorded, tmp_path):
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None}) as a:
        b = a.spawn_process(sanitizer={"output": None})
        view = SharingView.attach(b)
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(4096, 0)
        key, _ = acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, NO_PID_CHECK)
        handle, _ = acl.rt.malloc_physical(G, _physical_prop(), 0)
        shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
        with b.as_current():
            acl.rt.set_device(0)
            mine, _ = acl.rt.ipc_mem_import_by_key(key, 0)
            imported, _ = acl.rt.mem_import_from_shareable_handle(shared, 0)
            snapshot = MapSnapshot.of(b.device(0), sharing=view)
            svg = map_svg(snapshot)
            assert _drawn(svg, 'class="import"') == 2
            assert _drawn(svg, f"IPC key {key}: 4 KiB of process {a.pid} (device 0), "
                               f"mapped at {mine:#x}") == 1
            assert _drawn(svg, f"shareable handle {imported:#x}: 2 MiB of process "
                               f"{a.pid}") == 1
            assert f"mapped from another process: IPC key {key}" in text_map(snapshot)
            acl.rt.ipc_mem_close(key)
            acl.rt.free_physical(imported)
            assert MapSnapshot.of(b.device(0), sharing=view).imports == []
        # the exporter's own map has no import
        assert MapSnapshot.of(a.device(0), sharing=SharingView()).imports == []
        acl.rt.ipc_mem_close(key)
        acl.rt.free(ptr)
        acl.rt.free_physical(handle)
        b.close()
    # from B's recorded trace: the import is drawn at the moment it was open
    path = tmp_path / "b.jsonl"
    recorded["b"][0].save(str(path))
    out = io.StringIO()
    assert main(["map", str(path), "--at", "2", "--capacity", "64MiB"], out) == 0
    assert "mapped from another process: IPC key memsim-ipc-" in out.getvalue()
    assert "of process " in out.getvalue()


def test_the_player_draws_pool_blocks_in_their_granules_and_lists_imports(recorded):
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
        _pool_program(rt, SharingView())
    data = player_data(rec.trace, ["A2"])
    apis = data["apis"]
    panel = data["products"][0]
    drawn = [(apis[b[6]], b[2], b[4]) for b in panel["blocks"]]
    # each granule first cached (made), then holding its block's bytes; the small block's
    # granule cached again when given back
    assert drawn.count(("aclrtMemPoolMallocAsync", G, G)) == 1
    assert drawn.count(("aclrtMemPoolMallocAsync", MiB, G)) == 2   # the big's tail, the small
    assert drawn.count(("memory pool, cached", G, G)) == 4
    assert set(data["fills"]) == {str(apis.index("aclrtMemPoolMallocAsync")),
                                  str(apis.index("memory pool, cached"))}
    # at the end three granules are live: two of the big block, one cached
    live = {}
    for signed in panel["ops"][1::2]:
        if signed > 0:
            live[signed - 1] = panel["blocks"][signed - 1]
        else:
            live.pop(-signed - 1)
    assert sorted((apis[b[6]], b[2]) for b in live.values()) == [
        ("aclrtMemPoolMallocAsync", MiB), ("aclrtMemPoolMallocAsync", G),
        ("memory pool, cached", G)]
    # the importer's trace: each import with the events it was open for and its exporter
    importer = player_data(recorded["b"][0], ["A2"])["products"][0]
    assert [(m[0], m[1]) for m in importer["imports"]] == [(1, 3), (2, 4)]
    assert importer["imports"][0][2].startswith("IPC key memsim-ipc-")
    assert "of process" in importer["imports"][1][2]
    page = player_html(recorded["b"][0], ["A2"])
    assert "mapped from another process" in page


def test_whitelists_and_attributes_are_traced_and_counted():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None}) as a:
        b = a.spawn_process(sanitizer={"output": None})
        with Recorder(a) as rec:
            acl.rt.set_device(0)
            ptr, _ = acl.rt.malloc(4096, 0)
            key, _ = acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, 0)
            assert acl.rt.ipc_mem_set_import_pid(key, [b.pid, 77]) == 0
            handle, _ = acl.rt.malloc_physical(G, _physical_prop(), 0)
            shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, 0)
            assert acl.rt.mem_set_pid_to_shareable_handle(shared, [b.pid]) == 0
            pool, _ = acl.rt.mem_pool_create(_pool_props())
            assert acl.rt.mem_pool_set_attr(
                pool, acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, 4 * MiB) == 0
            assert acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH,
                                            7) == acl.ACL_ERROR_RT_INTERNAL_ERROR
            acl.rt.mem_pool_destroy(pool)
            acl.rt.ipc_mem_close(key)
            acl.rt.free(ptr)
            acl.rt.free_physical(handle)
        b.close()
    events = {e["event"]: e for e in rec.trace.events}
    assert events["ipc_set_import_pid"]["pids"] == sorted([b.pid, 77])
    assert events["ipc_set_import_pid"]["key"] == key
    assert events["shareable_set_pid"]["shareable"] == shared
    assert events["mem_pool_set_attr"]["value"] == 4 * MiB   # the failed call left none
    assert [e["event"] for e in rec.trace.events].count("mem_pool_set_attr") == 1
    result = replay(loads(rec.trace.dumps()), "A2", capacity=64 * MiB)
    assert result.problems == [] and result.skipped == {}
    assert {k: result.recorded[k] for k in ("ipc_set_import_pid", "shareable_set_pid",
                                            "mem_pool_set_attr")} == dict.fromkeys(
        ("ipc_set_import_pid", "shareable_set_pid", "mem_pool_set_attr"), 1)
