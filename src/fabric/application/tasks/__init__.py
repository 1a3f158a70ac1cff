"""Tasks queued for a later run: the service every queueing way in shares (HTTP, workers),
the approvals its runs wait on, and resuming a task that stopped at its step limit."""

from .approvals import Approvals
from .errors import Conflict, NotFound, NotResumable, ServiceUnavailable
from .ports import Runs, RunTask
from .resume import RESUMABLE, requeue
from .service import TaskService

__all__ = [
    "RESUMABLE",
    "Approvals",
    "Conflict",
    "NotFound",
    "NotResumable",
    "RunTask",
    "Runs",
    "ServiceUnavailable",
    "TaskService",
    "requeue",
]
