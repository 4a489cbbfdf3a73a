"""A distributed job's ranks on the simulated machine: each rank run on a card of its own
(:mod:`.run`, ``estimate --world-size N``), its process groups on torch's fake process group
with HCCL's communicators on its device (:mod:`.distributed`, :mod:`.hccl`, DDP's buffers
:mod:`.ddp`), the report per rank (:mod:`.report`) and its picture (:mod:`.plot`), and the
searches over the job's settings (:mod:`.search`)."""

from .report import RanksResult
from .run import estimate_ranks

__all__ = ["estimate_ranks", "RanksResult"]
