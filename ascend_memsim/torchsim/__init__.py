"""Run an unchanged torch_npu training script on CPU with fake tensors, every NPU storage
allocated and freed through torch_npu's simulated caching allocator: will it fit?

A front end, as :mod:`ascend_memsim.acl` is for pyacl programs: this package imports torch
(only it does: ``import ascend_memsim`` works without torch). :func:`estimate` runs a script
or a function, :func:`estimate_ranks` each rank of a distributed job (:mod:`.ranks`,
:mod:`.runtime_share`); :mod:`.torch_npu` is the stand-in ``torch_npu``, a
tree shaped like the real package (``torch_npu.npu`` is also ``torch.npu``); :mod:`.session`
tracks the storages; :mod:`.standin` serves ``torch_npu`` for the run. :func:`fit_script`
and :func:`sweep_script` (:mod:`.search`) run a
script once and search the capacity and the allocator settings by replays of its snapshot;
:mod:`.limits` says what runs otherwise than on the NPU (``torch.compile``, ACL graphs,
``.item()``).
"""

from .estimate import NOT_COUNTED, EstimateResult, estimate
from .limits import EstimateStopped, UnsupportedFeature
from .ranks import RanksResult, estimate_ranks
from .search import ScriptSearch, fit_script, sweep_script
from .session import DataDependentOperation

__all__ = ["estimate", "EstimateResult", "DataDependentOperation", "NOT_COUNTED",
           "estimate_ranks", "RanksResult", "fit_script", "sweep_script", "ScriptSearch",
           "EstimateStopped", "UnsupportedFeature"]
