"""Tasks queued for a later run: the service every queueing way in shares (HTTP today), its
executor, the approvals its runs wait on, and resuming a task that was cut off."""

from .approvals import Approvals
from .errors import Conflict, NotFound, NotResumable, ServiceUnavailable
from .executor import LocalExecutor, RunTask
from .ports import Runs
from .resume import RESUMABLE, requeue
from .service import TaskService

__all__ = [
    "RESUMABLE",
    "Approvals",
    "Conflict",
    "LocalExecutor",
    "NotFound",
    "NotResumable",
    "RunTask",
    "Runs",
    "ServiceUnavailable",
    "TaskService",
    "requeue",
]
