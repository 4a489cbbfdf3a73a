"""Write the pictures of :mod:`.viz` to a file, in the format its extension names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .viz import MapSnapshot, html_page, map_svg, stack_svg, text_map, timeline_svg

if TYPE_CHECKING:
    from .closeup import Closeup
    from .replay import Timeline

__all__ = ["save_picture"]


def save_picture(path: str, *, snapshot: MapSnapshot | None = None,
                 timeline: Timeline | None = None, title: str | None = None,
                 text: str = "", color_by: str = "page",
                 maps: Sequence[MapSnapshot] = (), closeups: Sequence[Closeup] = ()) -> None:
    """Write ``path`` by its extension: ``.svg`` (the timeline and/or the map; both as two
    panels of one SVG), ``.html`` (both and ``text``), ``.png`` (matplotlib, both panels).
    ``maps`` are more maps drawn after the map (a caching allocator's segments,
    :mod:`.allocmap`), each a panel of its own; ``closeups`` blocks drawn close up
    (:mod:`.closeup`), last.

    ``title`` heads the picture: the timeline when there is one, else the map (whose own
    description then follows in its subtitle); the page's title for HTML.

    Raises:
        ValueError: another extension, or nothing to draw.
    """
    lower = path.lower()
    if lower.endswith(".png"):
        from .png import save_png  # matplotlib: imported only when a PNG is asked for

        save_png(path, snapshot=snapshot, timeline=timeline, title=title or "",
                 color_by=color_by, maps=maps, closeups=closeups)
        return
    from .closeup import closeup_svg

    if lower.endswith(".svg"):
        panels = []
        if timeline is not None:
            panels.append(timeline_svg(timeline, title=title or "Bytes in use"))
        if snapshot is not None:
            # the title heads the first panel: the map's own when it is alone
            panels.append(map_svg(snapshot, color_by=color_by,
                                  title=title if timeline is None else None))
        for more in maps:
            panels.append(map_svg(more, title=title if not panels else None))
        panels += [closeup_svg(one) for one in closeups]
        if not panels:
            raise ValueError("nothing to draw")
        # both: one SVG, the timeline above the map
        content = panels[0] if len(panels) == 1 else stack_svg(*panels)
    elif lower.endswith((".html", ".htm")):
        sections = []
        if timeline is not None:
            sections.append(("Timeline", timeline_svg(timeline, title=timeline.heading)))
        if snapshot is not None:
            sections.append(("Memory map", map_svg(snapshot, color_by=color_by)))
            sections.append(("Text map", text_map(snapshot)))
        for more in maps:
            sections.append((more.title, map_svg(more)))
        sections += [("Close-up", closeup_svg(one)) for one in closeups]
        if text:
            sections.append(("Report", text))
        content = html_page(title or "ascend-memsim", *sections)
    else:
        raise ValueError(f"{path!r}: the picture format comes from the extension: .svg, "
                         f".html or .png")
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
