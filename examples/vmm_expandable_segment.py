"""torch_npu's expandable segment, in Python against ``acl.rt`` (virtual memory, 11-04).

The shape follows ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``,
``struct ExpandableSegment``:

- at construction it reserves address space for 1 1/8 of the device's memory
  (``aclrtGetMemInfo(ACL_HBM_MEM)``'s total), ``segment_size * max_handles`` bytes, with
  flags 1;
- ``map(offset, size)`` backs every segment (20 MiB in the large pool) the range touches with
  its own physical handle (``ACL_HBM_MEM_HUGE``, so 2 MiB pages), then maps each; when
  ``aclrtMallocPhysical`` says ``ACL_ERROR_RT_MEMORY_ALLOCATION`` it frees the handles it made
  in this call and reports that nothing was mapped;
- ``unmap(offset, size)`` unmaps and frees the segments wholly inside the range;
- at the end everything is unmapped and the range released.

:class:`TensorArena` is a toy client: tensors placed one after another in the segment (so a
tensor may straddle two handles), the oldest tensors dropped and their whole segments unmapped
when the device is full. ``python examples/vmm_expandable_segment.py`` runs a short
demonstration; ``tests/test_vmm_examples.py`` checks the figures on A2, A3 and 950PR.
"""

from __future__ import annotations

try:
    import acl
except ModuleNotFoundError:  # no Ascend toolkit on this machine: run on the simulator
    from ascend_memsim import install_acl

    install_acl()
    import acl

MiB = 1 << 20
ACL_HBM_MEM = 1
ACL_HBM_MEM_HUGE = 4
ACL_MEM_LOCATION_TYPE_DEVICE = 1
ACL_ERROR_RT_MEMORY_ALLOCATION = 207001
K_LARGE_BUFFER = 20 * MiB


class AclError(RuntimeError):
    pass


def check(ret: int, call: str) -> None:
    if ret != 0:
        raise AclError(f"{call} returned {ret}: {acl.get_recent_err_msg()}")


class ExpandableSegment:
    """A reserved range backed, segment by segment, by physical handles."""

    def __init__(self, device: int, segment_size: int = K_LARGE_BUFFER) -> None:
        self.device = device
        self.segment_size = segment_size
        _, total, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
        check(ret, "aclrtGetMemInfo")
        # "we allocate enough address space for 1 1/8 the total memory on the NPU"
        self.max_handles = -(-(total + total // 8) // segment_size)
        self.ptr, ret = acl.rt.reserve_mem_address(segment_size * self.max_handles, 0, 0, 1)
        check(ret, "aclrtReserveMemAddress")
        self.handles: list[int | None] = []

    def _prop(self) -> dict:
        return {"handleType": 0, "allocationType": 0, "memAttr": ACL_HBM_MEM_HUGE,
                "location": {"type": ACL_MEM_LOCATION_TYPE_DEVICE, "id": self.device},
                "reserve": 0}

    def map(self, offset: int, size: int) -> int:
        """Back ``[offset, offset + size)`` with memory; the bytes mapped (0: out of memory)."""
        seg = self.segment_size
        begin, end = offset // seg, -(-(offset + size) // seg)
        while len(self.handles) < end:
            self.handles.append(None)
        made = []
        for i in range(begin, end):
            if self.handles[i] is not None:
                continue
            handle, ret = acl.rt.malloc_physical(seg, self._prop(), 0)
            if ret == ACL_ERROR_RT_MEMORY_ALLOCATION:
                for j in made:
                    check(acl.rt.free_physical(self.handles[j]), "aclrtFreePhysical")
                    self.handles[j] = None
                return 0
            check(ret, "aclrtMallocPhysical")
            self.handles[i] = handle
            made.append(i)
        for i in made:
            check(acl.rt.map_mem(self.ptr + i * seg, seg, 0, self.handles[i], 0), "aclrtMapMem")
        return len(made) * seg

    def unmap(self, offset: int, size: int) -> int:
        """Unmap and free the segments wholly inside the range; the bytes unmapped."""
        seg = self.segment_size
        begin, end = -(-offset // seg), (offset + size) // seg
        done = 0
        for i in range(begin, min(end, len(self.handles))):
            handle = self.handles[i]
            if handle is None:
                continue
            check(acl.rt.unmap_mem(self.ptr + i * seg), "aclrtUnmapMem")
            check(acl.rt.free_physical(handle), "aclrtFreePhysical")
            self.handles[i] = None
            done += seg
        return done

    def close(self) -> None:
        self.unmap(0, len(self.handles) * self.segment_size)
        check(acl.rt.release_mem_address(self.ptr), "aclrtReleaseMemAddress")

    @property
    def mapped_bytes(self) -> int:
        return sum(h is not None for h in self.handles) * self.segment_size


class TensorArena:
    """Tensors one after another in an expandable segment; the oldest dropped under pressure."""

    def __init__(self, segment: ExpandableSegment) -> None:
        self.segment = segment
        self.tensors: list[tuple[int, int]] = []   # (offset, size), oldest first
        self.top = 0

    def grow(self, size: int) -> int:
        """A tensor of ``size`` bytes at the top; its device address."""
        seg = self.segment
        while not self._fits(size):
            if not self.tensors:
                raise AclError("out of device memory with no tensor left to drop")
            self.drop_oldest()
        offset, self.top = self.top, self.top + size
        self.tensors.append((offset, size))
        return seg.ptr + offset

    def _fits(self, size: int) -> bool:
        seg = self.segment
        if self.top + size > seg.max_handles * seg.segment_size:
            raise AclError("the reserved range is used up")
        return seg.map(self.top, size) > 0 or self._already_mapped(self.top, size)

    def _already_mapped(self, offset: int, size: int) -> bool:
        seg = self.segment.segment_size
        return all(self.segment.handles[i] is not None
                   for i in range(offset // seg, -(-(offset + size) // seg)))

    def drop_oldest(self) -> int:
        """Forget the oldest tensor and unmap the segments no live tensor touches any more."""
        offset, _ = self.tensors.pop(0)
        low = self.tensors[0][0] if self.tensors else self.top
        return self.segment.unmap(0, low) if low > offset else 0


def demo() -> None:
    check(acl.init(), "aclInit")
    check(acl.rt.set_device(0), "aclrtSetDevice")
    segment = ExpandableSegment(0)
    arena = TensorArena(segment)
    for size in (30 * MiB, 50 * MiB, 7 * MiB):
        ptr = arena.grow(size)
        free, total, _ = acl.rt.get_mem_info(ACL_HBM_MEM)
        print(f"tensor of {size // MiB} MiB at {ptr:#x}: mapped {segment.mapped_bytes // MiB} "
              f"MiB, device free {free // MiB} of {total // MiB} MiB")
    segment.close()
    free, total, _ = acl.rt.get_mem_info(ACL_HBM_MEM)
    print(f"after close: device free {free // MiB} of {total // MiB} MiB")
    check(acl.rt.reset_device(0), "aclrtResetDevice")
    check(acl.finalize(), "aclFinalize")


if __name__ == "__main__":
    demo()
