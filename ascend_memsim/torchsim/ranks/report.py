"""What a distributed estimate found: each rank class's device total (caching allocator,
workspace, HCCL, the runtime's share) against the card, the first rank that fails and the
line of the script; ``str()`` is the summary, ``as_dict()`` the JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...allocators.stats import format_size as format_bytes
from ..estimate import EstimateResult, settings_line
from ..session import CATEGORIES
from .hccl import Communicator

__all__ = ["RankFigures", "RankClass", "RanksResult", "MODELLED", "KINDS", "NOT_COUNTED_RANKS"]

#: what the device total is made of, in the summary's (and a picture's) order
KINDS = ("parameters", "gradients", "optimizer", "activations", "cached", "workspace", "HCCL",
         "runtime")

#: device memory a real rank holds that the figures leave out (said in every report)
NOT_COUNTED_RANKS = (
    "operator workspaces the estimate does not make",
    "each HCCL communicator's small expansion window and AIV buffers",
)

#: said in every report: what the figures model and what they estimate
MODELLED = (
    "modelled: every NPU storage through torch_npu's caching allocator; HCCL communicators "
    "(2 x HCCL_BUFFSIZE per group used, 2 x P2P_HCCL_BUFFSIZE per send/receive pair), made "
    "on first use on the rank's device; the workspace allocator's blocks as far as the "
    "estimate makes them",
    "estimated: the runtime's share (context, streams, operator binaries), see "
    "runtime_share_source",
)


@dataclass
class RankFigures:
    """One traced rank: its estimate and what its device holds besides."""

    rank: int
    local_rank: int
    node: int
    estimate: EstimateResult
    #: the runtime's share, bytes
    runtime_share: int
    #: the workspace allocator's peak reserved bytes
    workspace: int
    communicators: list[Communicator] = field(default_factory=list)

    @property
    def hccl(self) -> int:
        return sum(c.size for c in self.communicators)

    @property
    def total(self) -> int:
        """Peak reserved + workspace + HCCL + runtime share: each at its own peak, all held
        together in a training step after the first."""
        return self.estimate.peak_reserved + self.workspace + self.hccl + self.runtime_share

    @property
    def margin(self) -> int:
        return self.estimate.capacity - self.total

    @property
    def fits(self) -> bool:
        return self.estimate.fits and self.margin >= 0

    def kinds(self) -> dict[str, int]:
        """The total by kind (KINDS); cached is reserved less allocated at its peak."""
        at_peak = self.estimate.at_peak
        held = [at_peak.get(name, 0) for name in CATEGORIES]
        return dict(zip(KINDS, (*held, self.estimate.peak_reserved - sum(held),
                                self.workspace, self.hccl, self.runtime_share)))

    @property
    def unknown(self) -> bool:
        """Whether the script stopped or failed on this rank without running out of memory:
        the verdict is unknown, not "does not fit"."""
        est = self.estimate
        return est.out_of_memory is None and self.margin >= 0 and (
            est.stopped is not None or est.status != 0)

    def verdict(self) -> str:
        """``fits``, ``DOES NOT FIT`` or ``unknown`` (the script stopped or failed)."""
        return "fits" if self.fits else "unknown" if self.unknown else "DOES NOT FIT"

    def failure(self) -> str | None:
        """Why this rank does not fit, with the script's line, or None."""
        est = self.estimate
        if est.out_of_memory is not None:
            oom = est.out_of_memory
            where = oom["frames"][0] if oom["frames"] else None
            return (oom["message"].split(" (", 1)[0]
                    + (f" at {where['filename']}:{where['line']} in {where['name']}"
                       if where else ""))
        if est.stopped is not None:
            return f"the script stopped: {est.stopped}"
        if est.status:
            return f"the script failed (exit status {est.status})"
        if self.margin < 0:
            return f"the device total is {format_bytes(-self.margin)} over the card"
        return None

    def as_dict(self) -> dict:
        return {"rank": self.rank, "local_rank": self.local_rank, "node": self.node,
                "kinds": self.kinds(), "peak_allocated": self.estimate.peak_allocated,
                "peak_reserved": self.estimate.peak_reserved, "workspace": self.workspace,
                "hccl": self.hccl, "runtime_share": self.runtime_share, "total": self.total,
                "margin": self.margin, "fits": self.fits, "failure": self.failure(),
                "communicators": [c.as_dict() for c in self.communicators],
                "out_of_memory": self.estimate.out_of_memory,
                "notes": list(self.estimate.notes)}


@dataclass
class RankClass:
    """Ranks that are alike, and the traced rank that stands for them."""

    ranks: tuple[int, ...]
    figures: RankFigures
    #: what makes them alike (see ranks.class_key); () when every rank was traced
    key: tuple = ()


def _ranks_text(ranks: tuple[int, ...]) -> str:
    """"0-3,8,10-11": runs of consecutive ranks."""
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ",".join(parts)


@dataclass
class RanksResult:
    """A distributed estimate: the job, and one :class:`RankClass` per class of ranks."""

    source: str
    product: str
    capacity: int
    world_size: int
    cards_per_node: int
    alloc_conf: str
    hccl_buffsize: int
    p2p_buffsize: int
    runtime_share: int
    runtime_share_source: str
    #: "every rank" or "one rank per class"
    traced: str
    classes: list[RankClass]
    not_counted: tuple[str, ...] = NOT_COUNTED_RANKS

    @property
    def fits(self) -> bool:
        return all(c.figures.fits for c in self.classes)

    def first_failure(self) -> tuple[int, str | None] | None:
        """(the lowest rank that does not fit, why), or None."""
        failing = [(min(c.ranks), c.figures.failure()) for c in self.classes
                   if not c.figures.fits]
        return min(failing) if failing else None

    def rank(self, rank: int) -> RankFigures:
        """The figures that stand for ``rank`` (its class's traced rank)."""
        for c in self.classes:
            if rank in c.ranks:
                return c.figures
        raise KeyError(rank)

    def as_dict(self) -> dict:
        first = self.first_failure()
        return {
            "source": self.source, "product": self.product, "capacity": self.capacity,
            "world_size": self.world_size, "cards_per_node": self.cards_per_node,
            "alloc_conf": self.alloc_conf, "hccl_buffsize_mb": self.hccl_buffsize,
            "p2p_hccl_buffsize_mb": self.p2p_buffsize, "runtime_share": self.runtime_share,
            "runtime_share_source": self.runtime_share_source, "traced": self.traced,
            "fits": self.fits,
            "first_failure": None if first is None else {"rank": first[0], "why": first[1]},
            "classes": [{"ranks": list(c.ranks), "traced_rank": c.figures.rank,
                         "key": [list(k) for k in c.key], **c.figures.as_dict()}
                        for c in self.classes],
            "modelled": list(MODELLED), "not_counted": list(self.not_counted)}

    def __str__(self) -> str:
        size = format_bytes
        lines = [f"{self.source}: {self.world_size} ranks on {self.product}, "
                 f"{self.cards_per_node} cards a node, {size(self.capacity)} each; "
                 f"PYTORCH_NPU_ALLOC_CONF={self.alloc_conf or '(default)'}, "
                 f"HCCL_BUFFSIZE={self.hccl_buffsize} MB, "
                 f"P2P_HCCL_BUFFSIZE={self.p2p_buffsize} MB",
                 f"  traced: {self.traced}"
                 + ("" if self.traced == "every rank" else
                    f" ({len(self.classes)} classes: ranks alike by the size of each group "
                    f"they are in and their place in it)"),
                 f"  {'ranks':<12}{'reserved':>12}{'workspace':>12}{'HCCL':>12}"
                 f"{'runtime':>12}{'total':>12}{'margin':>12}  verdict"]
        for c in self.classes:
            f = c.figures
            lines.append(f"  {_ranks_text(c.ranks):<12}{size(f.estimate.peak_reserved):>12}"
                         f"{size(f.workspace):>12}{size(f.hccl):>12}"
                         f"{size(f.runtime_share):>12}{size(f.total):>12}"
                         f"{size(f.margin):>12}  {f.verdict()}")
        for c in self.classes:
            f = c.figures
            lines.append(f"  rank {f.rank}" + ("" if len(c.ranks) == 1 else
                                                f" (for ranks {_ranks_text(c.ranks)})") + ":")
            lines += [f"    {name:<12} {size(value):>12}" for name, value in f.kinds().items()]
            for comm in f.communicators:
                lines.append(f"      HCCL {comm.kind} communicator, group {comm.group} "
                             f"(ranks {_ranks_text(comm.ranks)}): {size(comm.size)}")
            lines += [f"    note: {note}" for note in f.estimate.notes]
            if f.estimate.stack_settings:
                lines.append("    " + settings_line(f.estimate.stack_settings))
        first = self.first_failure()
        if first is None:
            low = min(self.classes, key=lambda c: c.figures.margin)
            lines.append(f"  verdict: fits on every rank; the smallest margin is "
                         f"{size(low.figures.margin)} (rank {low.figures.rank})")
        elif self.rank(first[0]).unknown and all(
                c.figures.fits or c.figures.unknown for c in self.classes):
            lines.append(f"  verdict: unknown, rank {first[0]} first: {first[1]}")
        else:
            lines.append(f"  verdict: DOES NOT FIT: rank {first[0]} first: {first[1]}")
        lines.append(f"  runtime share: {size(self.runtime_share)}, "
                     f"{self.runtime_share_source}")
        lines += [f"  {text}" for text in MODELLED]
        lines.append("  not counted: " + "; ".join(self.not_counted))
        return "\n".join(lines)
