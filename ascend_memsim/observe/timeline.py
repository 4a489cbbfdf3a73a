"""The timeline of a replay: bytes in use per component over the events, in bounded memory."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Timeline", "POINTS"]

#: a replay's timeline keeps about this many points at most
POINTS = 2000


@dataclass
class Timeline:
    """Bytes in use (footprints) per component after the events that changed them.

    A replay keeps at most about 2,000 points whatever the trace's length: beyond that, the
    events are grouped in buckets of :attr:`bucket` events and each keeps its highest point.
    """

    #: (event index, {component: bytes}) — one point per change, first point at -1 (empty)
    points: list[tuple[int, dict[str, int]]] = field(default_factory=lambda: [(-1, {})])
    #: event indices of failed mallocs (the first :data:`POINTS` of them)
    failures: list[int] = field(default_factory=list)
    #: how many mallocs failed in all
    failed: int = 0
    capacity: int = 0
    events: int = 0
    #: events per bucket: 1 keeps every change; above 1 each point is the highest total
    #: within its bucket of that many events (peaks exact), plus the state at the end
    bucket: int = 1
    #: colours of some components (else each its component colour)
    colors: dict[str, str] = field(default_factory=dict)
    #: the stacking order, bottom first, of the components it names (else largest peak
    #: first)
    order: tuple[str, ...] = ()
    #: what the values are (the PNG's axis)
    quantity: str = "MiB in use (footprint)"
    #: the timeline's own heading where the picture has no title for it (HTML)
    heading: str = "Bytes in use"

    def components(self) -> list[str]:
        """Every component seen, in :attr:`order` or largest peak first."""
        peak: dict[str, int] = {}
        for _, by in self.points:
            for name, n in by.items():
                peak[name] = max(peak.get(name, 0), n)
        if self.order:
            return [n for n in self.order if n in peak] + sorted(
                (n for n in peak if n not in self.order), key=lambda c: (-peak[c], c))
        return sorted(peak, key=lambda c: (-peak[c], c))


class _Timeline:
    """Collects a :class:`Timeline` in at most ``limit`` (+2) points: the event indices are
    cut into buckets of ``bucket`` events, doubled whenever the points would pass the limit,
    and each bucket keeps its highest total (so every peak stays exact); the last point is
    the state at the end. O(1) amortised per change, O(limit) memory."""

    def __init__(self, track: Timeline, limit: int = POINTS) -> None:
        self.track = track
        self.limit = limit
        self.by: dict[str, int] = {}
        self.bucket = -1      # the bucket number of the last point
        self.high = -1        # its total
        self.current = True   # the last point is the state now

    def change(self, index: int, name: str, delta: int, total: int) -> None:
        by = self.by
        by[name] = by.get(name, 0) + delta
        points = self.track.points
        bucket = index // self.track.bucket
        if bucket == self.bucket:
            if total > self.high:
                points[-1] = (index, dict(by))
                self.high, self.current = total, True
            else:
                self.current = False
            return
        points.append((index, dict(by)))
        self.bucket, self.high, self.current = bucket, total, True
        if len(points) > self.limit:
            self._coarsen()

    def _coarsen(self) -> None:
        """Double the bucket width and keep each new bucket's highest point."""
        track = self.track
        track.bucket *= 2
        kept: list[tuple[int, dict[str, int]]] = [track.points[0]]
        kept_bucket = kept_high = None
        for index, by in track.points[1:]:
            bucket, total = index // track.bucket, sum(by.values())
            if bucket == kept_bucket:
                if kept_high is not None and total > kept_high:
                    kept[-1], kept_high = (index, by), total
                continue
            kept.append((index, by))
            kept_bucket, kept_high = bucket, total
        track.points = kept
        # set: the loop ran (there are more points than the limit)
        self.bucket, self.high = kept_bucket, kept_high  # type: ignore[assignment]

    def failure(self, index: int) -> None:
        """A malloc failed at event ``index`` (O(1); the first POINTS are kept)."""
        self.track.failed += 1
        if len(self.track.failures) < self.limit:
            self.track.failures.append(index)

    def finish(self, last_index: int) -> None:
        if not self.current:
            self.track.points.append((last_index, dict(self.by)))
