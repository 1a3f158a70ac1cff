"""Replaying a recorded run (``fabric replay``), and the recorded parts that a resume re-drives
its finished steps with: ``recording`` reads a runlog back into steps; ``replies`` answers the
model calls and summaries from it, ``tools`` the tool calls, ``checks`` the pack's checks and
brief, ``offers`` says which tools each step offered; ``watching`` checks the replay's own
runlog as it is written, ``divergence`` says where a re-drive first differs, ``replaying`` runs
the loop again and reports."""

from .divergence import Diverged, Divergence, ReplayState
from .recording import Recording
from .replaying import ReplayReport, replay

__all__ = ["Diverged", "Divergence", "Recording", "ReplayReport", "ReplayState", "replay"]
