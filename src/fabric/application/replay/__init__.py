"""Replaying a recorded run (``fabric replay``), and the recorded parts that a resume re-drives
its finished steps with: ``recording`` reads a runlog back into steps, ``recorded`` answers the
model, the tools, the checks and the brief from it, ``divergence`` says where a re-drive first
differs, ``replaying`` runs the loop again and reports."""

from .divergence import Diverged, Divergence, ReplayState
from .recording import Recording
from .replaying import ReplayReport, replay

__all__ = ["Diverged", "Divergence", "Recording", "ReplayReport", "ReplayState", "replay"]
