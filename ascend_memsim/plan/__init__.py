"""Planning: will a recorded job fit, on which capacity, with which allocator settings.

Above :mod:`ascend_memsim.observe` (which replays one source once) and
:mod:`ascend_memsim.allocators`, below the command line: the capacity search
(:func:`fit_capacity`), the sweep of settings (:func:`sweep_settings`), the compiled source
they replay (:mod:`.columns`) and the worker processes that replay side by side
(:mod:`.search`); a study over a grid of snapshots x products x capacities x settings
(:func:`study`, :mod:`.grid`, :mod:`.cells`), run in this process, in local worker processes
or on a Dask cluster (:mod:`.executors`), its answers kept by content (:mod:`.cache`).
"""

from .fit import (
    DEFAULT_WINDOW,
    MAX_WINDOW,
    FitSearch,
    Sweep,
    default_candidates,
    fit_capacity,
    sweep_settings,
)
from .grid import Grid, read_grid
from .study import Study, StudyRow, study

__all__ = ["fit_capacity", "sweep_settings", "default_candidates", "FitSearch", "Sweep",
           "DEFAULT_WINDOW", "MAX_WINDOW", "study", "Grid", "read_grid", "Study", "StudyRow"]
