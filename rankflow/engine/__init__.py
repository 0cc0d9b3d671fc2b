"""What every experiment family shares: the chunk plan and padding of a batch
(:mod:`.plan`), the program cache and trace counts (:mod:`.programs`), status codes
(:mod:`.status`), progress, the executors (local, submitit), the one execute/resume loop
(:mod:`.execute`), the results folder (:mod:`.store`; its names and manifest
:mod:`.manifest`, its provenance :mod:`.provenance`; :mod:`.writer`), the devices
(:mod:`.devices`) and what the machine is (:mod:`.sysinfo`). A family plugs in through
:class:`Family`."""

from .execute import Summary as Summary
from .execute import execute as execute
from .execute import run as run
from .family import Family as Family
from .plan import Chunk as Chunk
from .plan import chunk_plan as chunk_plan
from .plan import pad_runs as pad_runs
from .plan import plan as plan
from .plan import swept_structure_keys as swept_structure_keys
from .programs import TRACE_COUNTS as TRACE_COUNTS
from .programs import enable_compilation_cache as enable_compilation_cache
from .programs import program as program
from .status import STATUS as STATUS
from .status import Status as Status
from .status import with_status as with_status

__all__ = [
    "STATUS",
    "TRACE_COUNTS",
    "Chunk",
    "Family",
    "Status",
    "Summary",
    "chunk_plan",
    "enable_compilation_cache",
    "execute",
    "pad_runs",
    "plan",
    "program",
    "run",
    "swept_structure_keys",
    "with_status",
]
