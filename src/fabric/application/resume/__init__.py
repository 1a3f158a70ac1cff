"""Continuing an interrupted run: ``fabric resume``.

A run that never wrote ``run_finished`` (the process was killed, the machine or the service
restarted), one that was cancelled (Ctrl-C), or one that stopped at ``max_steps`` and is given
more steps, goes on with the same run id, workspace and runlog. The unchanged loop
(``execute_task``) is driven again: for the steps already complete in the log (their
``llm_response`` and every ``tool_result`` are there) the model's replies and the tools'
results come from the log, as a replay serves them, so the model is not asked again and no
tool runs twice; from the first incomplete step on, the live chat client and the pack's real
tools take over. A runlog wrapper drops the events of the re-driven steps (they are in the
log already), writes ``run_resumed`` and passes the rest on.

A run has one end: the ``run_finished`` of a run resumed after ``max_steps`` or a cancel goes
into ``run_resumed`` (as ``ended``), in its place in the log (``JsonlRunLog.reopen`` replaces
it), so the log still ends with exactly one ``run_finished``, the resumed run's (ADR 0010).

``plan`` reads from the log whether and from where a run can go on, and what its end was;
``handover`` has the model, tools, offers and after-call hooks answer from the log for the
re-driven steps and live after them; ``runlog`` is the reopened log; ``resuming`` drives the
loop again (``resume_task``).
"""

from .plan import RESUMABLE, ResumePlan, ended, logged_result, plan_resume, recovered_plan
from .resuming import resume_task
from .runlog import ResumingRunLog

__all__ = [
    "RESUMABLE",
    "ResumePlan",
    "ResumingRunLog",
    "ended",
    "logged_result",
    "plan_resume",
    "recovered_plan",
    "resume_task",
]
