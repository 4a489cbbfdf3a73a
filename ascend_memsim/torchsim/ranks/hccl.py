"""HCCL communicators on a rank's simulated device: each takes its buffer from device memory,
outside torch_npu's caching allocator, on first use.

What decides, and where it is written:

- **Size of a communicator**: ``2 x HCCL_BUFFSIZE`` MB, "分别用于收发内存" (one half to send,
  one to receive), held by HCCL alone, per communicator: the CANN environment-variable
  reference, ``HCCL_BUFFSIZE`` (envref_07_0080 in CANN 8.0.0 to 9.0.0, envref_07_0081 in
  7.0.0: an integer >= 1, default 200 MB; CANN 6.3.RC2's TF migration guide, tfmigr1_000155,
  gives the range [1, 2048] and the same default). A size given per communicator
  (``HcclCommConfig.hcclBufferSize``, the HCCL API reference hcclcpp_07_0047: MB, default
  200) comes first.
- **torch_npu's defaults**: ``OptionsManager::GetHcclBufferSize`` (``Ascend/pytorch``
  ``torch_npu/csrc/core/npu/register/OptionsManager.cpp``: ``HCCL_BUFFSIZE``, default 200,
  must be positive) and ``GetP2PBufferSize`` (``P2P_HCCL_BUFFSIZE``, default 20, not negative).
- **Per group**: ``ProcessGroupHCCL.Options().hccl_config = {"hccl_buffer_size": MB}``
  given to ``init_process_group`` or ``new_group`` (Ascend Extension for PyTorch 6.0.0,
  performance_tuning_0052); ``ProcessGroupHCCL.cpp`` ``createHcclCommConfigWithOptions``
  copies it into the communicator's ``hcclBufferSize`` and refuses a value that is not an int
  ("Value type of hccl_buffer_size should be int.").
- **Point-to-point**: ``ProcessGroupHCCL.cpp`` ``pointToPoint``: when ``P2P_HCCL_BUFFSIZE`` is
  not 0 and the call is not coalesced (``batch_isend_irecv`` coalesces), a send or receive
  uses a communicator of its own for the pair (this rank, peer), keyed by the two ranks,
  whose ``hcclBufferSize`` is ``P2P_HCCL_BUFFSIZE`` whatever the group's option says
  (``createHCCLCommSub``); otherwise it uses the group's communicator. The default became 20
  MB in Ascend Extension for PyTorch 7.1.0 (its environment-variable page, Envir_021:
  "7.1.0版本此环境变量已默认配置为20MB, 若升级后出现oom, 可在模型侧将此环境变量配置为0");
  before (6.0.0, Envir_013) unset meant 0, no P2P communicators. Each takes
  ``2 x P2P_HCCL_BUFFSIZE``.
- **When**: on first use. ``ProcessGroupHCCL::getHCCLComm`` makes the communicator the first
  time a collective (or a send/recv) of the group runs on the device and keeps it in
  ``devHCCLCommMap_``; a group never used has none. ``barrier`` runs an all-reduce of a
  one-element float tensor it allocates on the device (``ProcessGroupHCCL::barrier``).
- **One block**: hcomm's ``CCLBufferManager::CreateCommCCLbuffer`` (``hicann/hcomm``
  ``ccl_buffer_manager.cc``) allocates the input and output buffers as one device allocation
  (``DeviceMem::alloc``), with a small expansion window after them that is not modelled.

DECISION: the allocation is ``aclrtMallocWithCfg`` with the HCCL module id (the runtime's
module table), huge pages first, so ``aclrtGetMemUsageInfo`` shows it as HCCL's and it takes
the device's memory, fragments and fails as any other device allocation; MB is MiB (the
reference's sizing formula divides by 1024 * 1024).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...memory.constants import MODULE_NAMES, MallocAttrType, MallocPolicy, MiB
from ...memory.errors import AclError

__all__ = [
    "DEFAULT_HCCL_BUFFSIZE", "DEFAULT_P2P_HCCL_BUFFSIZE", "HcclSettings", "Communicator",
    "Communicators", "HcclBufferError",
]

#: HCCL_BUFFSIZE's default, MB (CANN's reference; torch_npu OptionsManager)
DEFAULT_HCCL_BUFFSIZE = 200
#: P2P_HCCL_BUFFSIZE's default, MB, from Ascend Extension for PyTorch 7.1.0 (0 before)
DEFAULT_P2P_HCCL_BUFFSIZE = 20

_HCCL_MODULE = next(m for m, name in MODULE_NAMES.items() if name == "HCCL")


class HcclBufferError(RuntimeError):
    """A communicator's buffer the device could not hold: ``size`` bytes asked."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


def _megabytes(environ: Mapping[str, str], name: str, default: int, low: int) -> int:
    text = environ.get(name)
    if text is None:
        return default
    try:
        if not text.isascii():
            # int() takes any script's digits (full-width ones): the variable is ASCII
            raise ValueError
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number of MB") from None
    if value < low:
        # OptionsManager.cpp: "HCCL_BUFFSIZE should be positive." / "P2P_HCCL_BUFFSIZE
        # cannot be negative."
        raise ValueError(f"{name}={value}: must be at least {low} (MB)")
    return value


@dataclass(frozen=True)
class HcclSettings:
    """The buffer sizes, MB: ``buffsize`` (HCCL_BUFFSIZE) for a group's communicator,
    ``p2p_buffsize`` (P2P_HCCL_BUFFSIZE) for a pair's; 0 turns P2P communicators off."""

    buffsize: int = DEFAULT_HCCL_BUFFSIZE
    p2p_buffsize: int = DEFAULT_P2P_HCCL_BUFFSIZE

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> HcclSettings:
        """The settings as torch_npu reads them from the environment.

        Raises:
            ValueError: a value that is not a whole number, HCCL_BUFFSIZE below 1 or
                P2P_HCCL_BUFFSIZE below 0.
        """
        environ = os.environ if environ is None else environ
        return cls(_megabytes(environ, "HCCL_BUFFSIZE", DEFAULT_HCCL_BUFFSIZE, 1),
                   _megabytes(environ, "P2P_HCCL_BUFFSIZE", DEFAULT_P2P_HCCL_BUFFSIZE, 0))


def group_buffer_size(pg_options: object) -> int | None:
    """``hccl_buffer_size`` (MB) of a ``ProcessGroupHCCL.Options``'s ``hccl_config``, or None.

    Raises:
        TypeError: not an int (ProcessGroupHCCL.cpp's check).
        ValueError: below 1.
    """
    config = getattr(pg_options, "hccl_config", None) or {}
    if "hccl_buffer_size" not in config:
        return None
    value = config["hccl_buffer_size"]
    if type(value) is not int:
        raise TypeError("Value type of hccl_buffer_size should be int.")
    if value < 1:
        raise ValueError(f"hccl_buffer_size={value}: must be at least 1 (MB)")
    return value


@dataclass
class Communicator:
    """One HCCL communicator a rank made: its buffer on the device."""

    #: the process group's name ("0" is the world group)
    group: str
    #: "group" (collectives) or "p2p" (a send/receive pair)
    kind: str
    #: the global ranks it joins
    ranks: tuple[int, ...]
    #: the buffer size, MB (the buffer is twice this)
    buffsize: int
    #: the device address of its buffer
    ptr: int = 0
    #: the script's frames when it was made
    frames: list = field(default_factory=list, repr=False)
    #: what set its size: "HCCL_BUFFSIZE", "hccl_buffer_size" (the group's option) or
    #: "P2P_HCCL_BUFFSIZE"
    sized_by: str = "HCCL_BUFFSIZE"
    #: the caching allocator's trace entries made before it (its place in the rank's
    #: snapshot, when the history is kept; -1 otherwise)
    entry: int = -1

    @property
    def size(self) -> int:
        """The bytes it holds on the device: 2 x buffsize MB."""
        return 2 * self.buffsize * MiB

    def as_dict(self) -> dict:
        where = self.frames[0] if self.frames else None
        return {"group": self.group, "kind": self.kind, "ranks": list(self.ranks),
                "buffsize_mb": self.buffsize, "size": self.size, "sized_by": self.sized_by,
                "made_at": (f"{where['filename']}:{where['line']}" if where else None)}


class Communicators:
    """The communicators of one rank, made lazily on ``runtime``'s current device;
    ``clock()`` tells each its place in the rank's trace (:attr:`Communicator.entry`)."""

    def __init__(self, runtime, clock: Callable[[], int] | None = None) -> None:
        self.runtime = runtime
        self.clock = clock
        self._settings: HcclSettings | None = None
        self._made: dict[tuple, Communicator] = {}

    @property
    def settings(self) -> HcclSettings:
        """Read from the environment at the first communicator, as torch_npu reads them once
        (a script may set them before its first collective)."""
        if self._settings is None:
            self._settings = HcclSettings.from_environ()
        return self._settings

    def all(self) -> list[Communicator]:
        return list(self._made.values())

    @property
    def total(self) -> int:
        return sum(c.size for c in self._made.values())

    def made(self, group: str) -> bool:
        """Whether the group's communicator is made."""
        return ("group", group) in self._made

    def for_group(self, group: str, ranks: tuple[int, ...], buffsize: int | None,
                  frames: list) -> Communicator:
        """The group's communicator, made now if it is the group's first use."""
        key = ("group", group)
        comm = self._made.get(key)
        if comm is None:
            size = self.settings.buffsize if buffsize is None else buffsize
            comm = self._make(key, Communicator(
                group, "group", ranks, size, frames=frames,
                sized_by="HCCL_BUFFSIZE" if buffsize is None else "hccl_buffer_size"))
        return comm

    def for_pair(self, group: str, ranks: tuple[int, ...], pair: tuple[int, int],
                 frames: list) -> Communicator | None:
        """The point-to-point communicator of ``pair`` (global ranks), made now on its first
        use; None when P2P_HCCL_BUFFSIZE is 0 (the group's communicator serves)."""
        p2p = self.settings.p2p_buffsize
        if not p2p:
            return None
        low, high = sorted(pair)
        key = ("p2p", group, low, high)
        comm = self._made.get(key)
        if comm is None:
            comm = self._make(key, Communicator(group, "p2p", (low, high), p2p, frames=frames,
                                                sized_by="P2P_HCCL_BUFFSIZE"))
        return comm

    def _make(self, key: tuple, comm: Communicator) -> Communicator:
        if self.clock is not None:
            comm.entry = self.clock()
        try:
            comm.ptr = self.runtime.malloc_with_cfg(
                comm.size, MallocPolicy.HUGE_FIRST, {MallocAttrType.MODULE_ID: _HCCL_MODULE})
        except AclError as e:
            # hcomm CCLBufferManager::CreateCCLbuffer's message
            raise HcclBufferError(
                f"HCCL: Create ccl buffer size[{comm.size}] fail, please check environmental "
                f"variable HCCL_BUFFSIZE ({comm.kind} communicator of group {comm.group}, "
                f"ranks {list(comm.ranks)}, 2 x {comm.buffsize} MB: {e})", comm.size) from None
        self._made[key] = comm
        return comm
