"""The caching allocator against a small, independent reference model of torch_npu's rules
(``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``: round_size,
get_pool, get_allocation_size, get_free_block, should_split, free_block): a linear scan over
plain lists, written from the source's text, not from the allocator's code."""

from hypothesis import given
from hypothesis import strategies as st
from test_npu_caching_allocator import check

from ascend_memsim import GiB, MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator

MIN_BLOCK, SMALL = 512, 1 << 20


def ref_round(size: int, pad: int, divisions: int) -> int:
    size += pad
    if size < MIN_BLOCK:
        return MIN_BLOCK
    if divisions > 1 and size > MIN_BLOCK * divisions:
        step = 1
        while step * 2 <= size:
            step *= 2
        step //= divisions
        if step == 0:
            return 2 * divisions
        return -(-size // step) * step
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def ref_segment(rounded: int) -> int:
    if rounded <= SMALL:
        return 2 * MiB
    if rounded < 10 * MiB:
        return 20 * MiB
    return -(-rounded // (2 * MiB)) * (2 * MiB)


def worth_splitting(small: bool, rest: int) -> bool:
    return rest >= MIN_BLOCK if small else rest > SMALL


class Reference:
    """Segments as lists of [address, size, allocated]; best fit by a linear scan."""

    def __init__(self, pad: int, divisions: int) -> None:
        self.pad, self.divisions = pad, divisions
        self.segments: list[dict] = []

    def malloc(self, size: int, stream: int) -> tuple[int | None, int, int]:
        """(address of the reused block or None for a new segment, rounded, segment size)."""
        rounded = ref_round(size, self.pad, self.divisions)
        small = rounded <= SMALL
        best = None
        for seg in self.segments:
            if seg["small"] != small or seg["stream"] != stream:
                continue
            for blk in seg["blocks"]:
                if not blk[2] and blk[1] >= rounded and (
                        best is None or (blk[1], blk[0]) < (best[1][1], best[1][0])):
                    best = (seg, blk)
        return (best[1][0] if best else None), rounded, ref_segment(rounded)

    def place(self, ptr: int, rounded: int, seg_size: int, stream: int, reused: bool) -> None:
        small = rounded <= SMALL
        if not reused:
            self.segments.append({"address": ptr, "small": small, "stream": stream,
                                  "blocks": [[ptr, seg_size, False]]})
        for seg in self.segments:
            for i, blk in enumerate(seg["blocks"]):
                if blk[0] == ptr:
                    rest = blk[1] - rounded
                    if worth_splitting(small, rest):
                        seg["blocks"][i:i + 1] = [[ptr, rounded, True],
                                                  [ptr + rounded, rest, False]]
                    else:
                        blk[2] = True
                    return
        raise AssertionError("placed block not found")

    def free(self, ptr: int) -> None:
        for seg in self.segments:
            blocks = seg["blocks"]
            for i, blk in enumerate(blocks):
                if blk[0] == ptr:
                    blk[2] = False
                    if i + 1 < len(blocks) and not blocks[i + 1][2]:
                        blk[1] += blocks.pop(i + 1)[1]
                    if i > 0 and not blocks[i - 1][2]:
                        blocks[i - 1][1] += blocks.pop(i)[1]
                    return

    def layout(self) -> list:
        return sorted((s["address"], s["small"], [(b[0], b[1], b[2]) for b in s["blocks"]])
                      for s in self.segments)


def layout(alloc: NpuCachingAllocator) -> list:
    return [(s["address"], s["small"],
             [(b["address"], b["size"], b["state"] == "active_allocated") for b in s["blocks"]])
            for s in alloc.segments()]


sizes = st.one_of(st.integers(1, 4096), st.integers(4096, 2 * MiB),
                  st.integers(2 * MiB, 24 * MiB))


@given(size=st.one_of(sizes, st.integers(24 * MiB, 1 * GiB)),
       product=st.sampled_from(["A2", "950PR"]),
       divisions=st.sampled_from([0, 1, 2, 4, 8, 16]))
def test_one_allocation_matches_the_reference(size, product, divisions):
    with Runtime(product, hbm_bytes=4 * GiB, sanitizer="off") as rt:
        conf = f"roundup_power2_divisions:{divisions}" if divisions else ""
        alloc = NpuCachingAllocator(rt, conf=conf)
        pad = 0 if product == "950PR" else 32
        rounded = ref_round(size, pad, divisions)
        ptr = alloc.malloc(size)
        (seg,) = alloc.segments()
        assert seg["total_size"] == ref_segment(rounded)
        assert seg["small"] == (rounded <= SMALL)
        rest = ref_segment(rounded) - rounded
        expected = rounded if worth_splitting(seg["small"], rest) else ref_segment(rounded)
        assert alloc.block_size(ptr) == expected
        check(alloc)


@given(ops=st.lists(st.one_of(st.tuples(st.just("malloc"), sizes, st.integers(0, 1)),
                              st.tuples(st.just("free"), st.integers(0, 30))), max_size=30),
       divisions=st.sampled_from([0, 4]))
def test_alloc_free_sequences_match_the_reference(ops, divisions):
    with Runtime("A2", hbm_bytes=2 * GiB, sanitizer="off") as rt:
        conf = f"roundup_power2_divisions:{divisions}" if divisions else ""
        alloc = NpuCachingAllocator(rt, conf=conf)
        streams = [0, rt.streams.create_stream()]
        ref = Reference(32, divisions)
        live: list[int] = []
        for op in ops:
            if op[0] == "malloc":
                stream = streams[op[2]]
                reused, rounded, seg_size = ref.malloc(op[1], stream)
                ptr = alloc.malloc(op[1], stream=stream)
                if reused is not None:
                    assert ptr == reused
                ref.place(ptr, rounded, seg_size, stream, reused is not None)
                live.append(ptr)
            elif live:
                ptr = live.pop(op[1] % len(live))
                alloc.free(ptr)
                ref.free(ptr)
            assert layout(alloc) == ref.layout()
            check(alloc)


@given(ops=st.lists(st.one_of(st.tuples(st.just("malloc"), sizes, st.integers(0, 1)),
                              st.tuples(st.just("free"), st.integers(0, 30)),
                              st.tuples(st.just("empty_cache"))), max_size=30))
def test_expandable_segments_keep_their_books_and_give_everything_back(ops):
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf="expandable_segments:True")
        streams = [0, rt.streams.create_stream()]
        live: list[int] = []
        for op in ops:
            if op[0] == "malloc":
                try:
                    ptr = alloc.malloc(op[1], stream=streams[op[2]])
                except Exception as e:  # only the allocator's own OOM may end a malloc
                    assert type(e).__name__ == "NpuOutOfMemoryError"
                else:
                    assert alloc.block_size(ptr) >= op[1]
                    live.append(ptr)
            elif op[0] == "free" and live:
                alloc.free(live.pop(op[1] % len(live)))
            elif op[0] == "empty_cache":
                alloc.empty_cache()
            check(alloc)
            mapped = sum(s["total_size"] for s in alloc.segments())
            assert rt.get_mem_info(1) == (256 * MiB - mapped, 256 * MiB)
        for ptr in live:
            alloc.free(ptr)
        alloc.empty_cache()
        assert alloc.segments() == [] and alloc.memory_stats()["reserved_bytes.all.current"] == 0
        assert rt.get_mem_info(1)[0] == 256 * MiB


class RefStat:
    """c10::CachingAllocator::Stat as c10/core/CachingAllocator.h writes update_stat."""

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def update(self, amount: int) -> None:
        self.current += amount
        self.peak = max(self.current, self.peak)
        if amount > 0:
            self.allocated += amount
        if amount < 0:
            self.freed += -amount


_ARRAY_NAMES = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")


@given(st.lists(st.tuples(st.integers(0, 8), st.booleans(), st.integers(-3, 1 << 40),
                          st.sampled_from(["add", "alloc", "requested", "completed"])),
                max_size=60))
def test_device_stats_match_one_stat_per_pool_kind(ops):
    """DeviceStats (ints in a list, the aggregate derived when read) gives the same
    memory_stats as one c10 Stat per (array, all / small_pool / large_pool) updated by
    for_each_selected_stat_type (NPUCachingAllocator.cpp), whatever the updates' order."""
    from ascend_memsim.allocators import stats as S

    stats = S.DeviceStats(123)
    ref = {name: [RefStat() for _ in range(3)] for name in _ARRAY_NAMES}
    current = {name: [0, 0] for name in _ARRAY_NAMES}

    def apply(name, small, amount):
        # keep every current >= 0, as the allocator's own updates do
        if current[name][0 if small else 1] + amount < 0:
            return False
        current[name][0 if small else 1] += amount
        ref[name][0].update(amount)
        ref[name][1 if small else 2].update(amount)
        return True

    for array, small, amount, kind in ops:
        name = _ARRAY_NAMES[array]
        if kind == "add":
            if apply(name, small, amount):
                stats.add(array * 8, small, amount)
        elif kind == "alloc":
            size, requested = abs(amount) + 512, abs(amount)
            for n, a in (("allocation", 1), ("allocated_bytes", size), ("active", 1),
                         ("active_bytes", size), ("requested_bytes", requested)):
                apply(n, small, a)
            stats.alloc_block(small, size, requested)
        elif kind == "requested":
            # undo the last alloc-like step when there is one to undo
            p = 0 if small else 1
            if current["allocation"][p] and current["allocated_bytes"][p] >= 512:
                apply("allocation", small, -1)
                apply("allocated_bytes", small, -512)
                stats.free_requested(small, 512)
        elif kind == "completed":
            p = 0 if small else 1
            if current["active"][p] and current["active_bytes"][p] >= 512:
                apply("active", small, -1)
                apply("active_bytes", small, -512)
                apply("requested_bytes", small, 0)
                stats.free_completed(small, 512, 0)
    flat = stats.flat()
    for name in _ARRAY_NAMES:
        for kind, r in zip(S.STAT_TYPES, ref[name]):
            got = {f: flat[f"{name}.{kind}.{f}"] for f in ("current", "peak", "allocated",
                                                           "freed")}
            assert got == {"current": r.current, "peak": r.peak, "allocated": r.allocated,
                           "freed": r.freed}, (name, kind)
