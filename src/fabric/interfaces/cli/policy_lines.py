"""How the policy's events read in a run's progress lines and in ``fabric show``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

POLICY_KINDS = frozenset({"policy_decision", "approval_requested", "approval"})


def describe_policy(event: Mapping[str, Any], arguments: str) -> str | None:
    """A progress line for a policy event: denials, approvals asked for, who approved or
    refused what (an ``ask`` verdict is told by the approval lines that follow it)."""
    kind, step = event["kind"], f"  step {event.get('step', 0):>2}  "
    what = f"{event.get('tool')} {arguments}".rstrip()
    if kind == "policy_decision":
        if event.get("verdict") != "deny":
            return None
        return f"{step}policy denies {what}: {event.get('reason', '')}"
    if kind == "approval_requested":
        timeout = event.get("timeout_s")
        within = f", up to {timeout:g} s" if isinstance(timeout, int | float) else ""
        return f"{step}waiting for approval of {what} ({event.get('rule')}{within})"
    answer = "approved" if event.get("approved") else "refused"
    scope = " for the rest of the run" if event.get("scope") == "run" else ""
    line = f"{step}{answer} by {event.get('by')}{scope}: {what}"
    if event.get("by") == "no terminal" and not event.get("approved"):
        line += "\n    (run again with --yes to approve, or change sandbox.policy in fabric.yaml)"
    return line
