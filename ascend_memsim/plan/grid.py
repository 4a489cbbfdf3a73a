"""The grid of a study: snapshots x products x capacities x allocator settings, from Python
values or from a small JSON or TOML file, checked before any replay.

A grid file is read as plain data nobody vouches for: at most :data:`MAX_GRID_BYTES`, one
object whose keys are the fields of :class:`Grid`, each holding strings and numbers only; a
snapshot's relative path is taken from the file's folder. Snapshots are read whole, once each
(only regular files: :func:`~ascend_memsim.observe.trace._open_file`), and named by the
SHA-256 of their bytes, which keys the study's cache.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass
from typing import Any

from ..allocators.conf import parse_alloc_conf, shown
from ..allocators.rules import DEFAULT_CANN, cann_tuple
from ..memory.constants import MiB
from ..memory.errors import AllocatorConfigError, InvalidArgument, InvalidArgumentType
from ..memory.profiles import DEFAULT_PRODUCT, MEMORY_SPAN, get_profile
from ..memory.units import human_bytes, parse_size
from ..observe.plain import safe_unpickle
from ..observe.snapshot import PICKLE_PROTOCOL, is_snapshot, loads_json
from ..observe.trace import _open_file
from .fit import DEFAULT_WINDOW, MAX_WINDOW, _check_int, default_candidates

__all__ = ["Grid", "Snapshot", "read_grid", "parse_snapshot", "MAX_GRID_BYTES", "MAX_CELLS"]

#: DECISION: a grid file is a few lines of names; a larger one is refused unread
MAX_GRID_BYTES = 1 * MiB
#: DECISION: the most cells one study takes (each is a capacity search of its own)
MAX_CELLS = 100_000
_FIELDS = ("snapshots", "products", "capacities", "settings", "cann", "step", "window")


@dataclass(frozen=True)
class Snapshot:
    """One snapshot of a study: its name in the table, the SHA-256 of its bytes (hex), and
    the bytes (a torch memory snapshot pickle, or its JSON), sent once to each worker."""

    name: str
    sha256: str
    data: bytes


def parse_snapshot(data: bytes) -> dict[str, Any]:
    """The snapshot dict in ``data`` (a pickle read by
    :func:`~ascend_memsim.observe.plain.safe_unpickle`, else JSON). Time and memory
    O(len(data)).

    Raises:
        InvalidArgument: ``data`` holds no memory snapshot.
        SnapshotError: a damaged pickle, or one that names a class (a ``ValueError``).
    """
    if data[:1] == b"\x80":
        value = safe_unpickle(data)
    else:
        try:
            value = loads_json(data)
        except (ValueError, RecursionError):
            value = None
    if not isinstance(value, dict) or not is_snapshot(value):
        raise InvalidArgument("not a memory snapshot (a torch_npu _dump_snapshot pickle, or "
                              "its JSON); a study replays snapshots")
    return value


def _read_snapshot(item: Any, index: int) -> Snapshot:
    if isinstance(item, dict):
        if not is_snapshot(item):
            raise InvalidArgument(f"snapshot {index + 1}: a dict that is no memory snapshot "
                                  f"(no 'segments' / 'device_traces')")
        data = pickle.dumps(item, protocol=PICKLE_PROTOCOL)
        name = f"<snapshot {index + 1}>"
    elif isinstance(item, (str, os.PathLike)):
        name = os.fspath(item)
        with _open_file(name) as f:
            data = f.read()
    else:
        raise InvalidArgumentType(f"a snapshot must be a path or a snapshot dict, not "
                                  f"{type(item).__name__}")
    return Snapshot(name, hashlib.sha256(data).hexdigest(), data)


def _names(value: Any, what: str) -> list[str]:
    """A list of strings from a list, or from one string separated by commas."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidArgument(f"{what} must be a non-empty list of names")
    out = []
    for v in value:
        if not isinstance(v, str):
            raise InvalidArgumentType(f"each of {what} must be a string, not "
                                      f"{type(v).__name__}")
        if v.strip() not in out:
            out.append(v.strip())
    return out


def _capacity(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_size(value)
    return _check_int("a capacity", value, 1, MEMORY_SPAN)


@dataclass
class Grid:
    """What a study replays: every snapshot on every product at every capacity (the card's
    memory, the top of each search; None: the product's own) with every allocator setting
    (``"default"``: :func:`default_candidates` of each product; else
    ``PYTORCH_NPU_ALLOC_CONF`` strings, ``""`` the default conf). ``cann``, ``step`` and
    ``window`` as :func:`fit_capacity` takes them."""

    snapshots: list[Any]
    products: list[str] | str = DEFAULT_PRODUCT
    capacities: list[Any] | None = None
    settings: list[str] | str = "default"
    cann: str = DEFAULT_CANN
    step: int = 2 * MiB
    window: int = DEFAULT_WINDOW

    @classmethod
    def from_dict(cls, value: Any) -> Grid:
        """A grid from plain data (a grid file's object): unknown keys are refused."""
        if not isinstance(value, dict):
            raise InvalidArgument("a grid must be an object (JSON) or a table (TOML) with "
                                  f"the keys {', '.join(_FIELDS)}")
        unknown = [k for k in value if k not in _FIELDS]
        if unknown:
            raise InvalidArgument(f"unknown key {str(unknown[0])[:60]!r} in the grid; it "
                                  f"takes {', '.join(_FIELDS)}")
        if "snapshots" not in value:
            raise InvalidArgument("the grid names no snapshots")
        return cls(**value)

    def checked(self) -> CheckedGrid:
        """The grid with every value checked and every snapshot read, before any replay.

        Raises:
            InvalidArgument(Type): a bad value (the message names it); a snapshot that
                cannot be read.
            AllocatorConfigError: a setting torch_npu refuses (the message names it).
        """
        cann_tuple(self.cann)
        step = _check_int("step", self.step, 1)
        if step % 64:
            raise InvalidArgument(f"step must be a positive multiple of 64 bytes, got {step}")
        window = _check_int("window", self.window, 0, MAX_WINDOW)
        products = _names(self.products, "products")
        profiles = [get_profile(p) for p in products]
        capacities = self.capacities
        if capacities is None or isinstance(capacities, (str, int)):
            capacities = [capacities]
        if not isinstance(capacities, (list, tuple)) or not capacities:
            raise InvalidArgument("capacities must be a non-empty list of sizes")
        caps = [_capacity(c) for c in capacities]
        for c in caps:
            if c is not None and c < step:
                raise InvalidArgument(f"a capacity must be at least one step "
                                      f"({human_bytes(step)}), got {c}")
        if None in caps:      # each product's own card: it too must hold one step
            for p in profiles:
                card = p.total(p.main_memory)
                if card < step:
                    raise InvalidArgument(
                        f"step {human_bytes(step)} is larger than {p.name}'s own card "
                        f"({human_bytes(card)}); a step must be at most the smallest capacity")
        if self.settings == "default":
            settings = {p.name: default_candidates(p.name, self.cann) for p in profiles}
        else:
            given = self.settings
            if isinstance(given, str):
                given = given.split(";")
            if not isinstance(given, (list, tuple)) or not given:
                raise InvalidArgument("settings must be 'default' or a non-empty list of "
                                      "PYTORCH_NPU_ALLOC_CONF strings")
            own: list[str] = []
            for conf in given:
                if not isinstance(conf, str):
                    raise InvalidArgumentType(f"a setting must be a string, not "
                                              f"{type(conf).__name__}")
                try:
                    parse_alloc_conf(conf.strip())
                except AllocatorConfigError as e:
                    raise AllocatorConfigError(f"{str(e).strip().rstrip(',')} (in the "
                                               f"setting {shown(conf.strip())!r})") from None
                if conf.strip() not in own:
                    own.append(conf.strip())
            settings = {p.name: own for p in profiles}
        snaps = self.snapshots
        if isinstance(snaps, (str, dict, os.PathLike)):
            snaps = [snaps]
        if not isinstance(snaps, (list, tuple)) or not snaps:
            raise InvalidArgument("snapshots must be a non-empty list of paths or dicts")
        cells = len(snaps) * len(caps) * sum(len(s) for s in settings.values())
        if cells > MAX_CELLS:
            raise InvalidArgument(f"the grid has {cells:,} cells; a study takes at most "
                                  f"{MAX_CELLS:,}")
        read = [_read_snapshot(s, i) for i, s in enumerate(snaps)]
        return CheckedGrid(read, [p.name for p in profiles], caps, settings, self.cann,
                           step, window)


@dataclass(frozen=True)
class CheckedGrid:
    """A grid :meth:`Grid.checked` checked: the snapshots read, the settings per product."""

    snapshots: list[Snapshot]
    products: list[str]
    capacities: list[int | None]
    settings: dict[str, list[str]]
    cann: str
    step: int
    window: int


def read_grid(path: str) -> Grid:
    """The grid in the JSON or TOML file at ``path`` (TOML by its ``.toml`` name; needs
    Python 3.11's ``tomllib``), a snapshot's relative path taken from the file's folder. At
    most :data:`MAX_GRID_BYTES` are read.

    Raises:
        InvalidArgument: a file that cannot be read, too large, not one JSON object or TOML
            table of the grid's keys.
    """
    with _open_file(path) as f:
        text = f.read(MAX_GRID_BYTES + 1)
    if len(text) > MAX_GRID_BYTES:
        raise InvalidArgument(f"{path}: a grid file is at most {human_bytes(MAX_GRID_BYTES)}")
    try:
        if path.endswith(".toml"):
            try:
                import tomllib  # type: ignore[import-not-found]  # Python 3.11+; refused below
            except ImportError:
                raise InvalidArgument("a TOML grid needs Python 3.11 or later (tomllib); "
                                      "write the grid as JSON") from None
            value = tomllib.loads(text.decode("utf-8"))
        else:
            value = loads_json(text)
    except (ValueError, RecursionError) as e:
        raise InvalidArgument(f"{path}: not a grid ({'TOML' if path.endswith('.toml') else 'JSON'}"
                              f"): {str(e)[:200]}") from None
    grid = Grid.from_dict(value)
    folder = os.path.dirname(path)
    if isinstance(grid.snapshots, str):
        grid.snapshots = [grid.snapshots]
    if isinstance(grid.snapshots, list):
        grid.snapshots = [os.path.join(folder, s) if isinstance(s, str) else s
                          for s in grid.snapshots]
    return grid
