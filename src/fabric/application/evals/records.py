"""What one finished attempt leaves: a line of ``attempts.jsonl``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import Struct, field

TIMEOUT = "timeout"
"""The status of an attempt whose run passed its wall-clock cap (``limits.timeout_s``)."""
ERROR = "error"
"""The status of an attempt whose run could not be made (fabric's own failure)."""
COMPLETED = "completed"
UNCONFIRMED = "completed_unconfirmed"


class CheckResult(Struct, frozen=True):
    """One check of a finished attempt: what was checked, whether it passed, and the evidence
    (an exit code and the output's tail, or the assertion that failed)."""

    kind: str
    label: str
    passed: bool
    evidence: str
    errored: bool = False
    """The check could not be made (its program is missing, the sandbox failed): a fault of
    the machine or the suite, not a verdict on the run."""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "check": self.label,
            "passed": self.passed,
            "evidence": self.evidence,
        }
        if self.errored:
            out["errored"] = True
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckResult:
        return cls(
            str(data.get("kind", "")),
            str(data.get("check", "")),
            bool(data.get("passed")),
            str(data.get("evidence", "")),
            bool(data.get("errored", False)),
        )


class AttemptRecord(Struct, frozen=True):
    """A finished attempt of a case."""

    case: str
    attempt: int
    tier: str
    pack: str
    status: str
    """How the run ended (a run status), or ``timeout`` / ``error``."""
    passed: bool
    checks: tuple[CheckResult, ...]
    steps: int
    tokens: int
    cost_usd: float | None
    wall_s: float
    run_id: str
    runlog: str
    """The runlog's path relative to the eval's output folder."""
    finished: str
    """When the attempt ended (UTC, ISO 8601)."""
    model: str | None = None
    backend: str | None = None
    error: Mapping[str, str] | None = None
    prompt_tokens: int | None = None
    """The tokens of the requests the run sent (None: a record of an older fabric)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys a newer fabric wrote that this one does not know (kept as they were)."""

    @property
    def check_error(self) -> bool:
        """A check could not be made, so the attempt's verdict is not the run's doing."""
        return any(c.errored for c in self.checks)

    @property
    def false_success(self) -> bool:
        """The run claimed it was done, and the checks (all of them made) say it was not."""
        return self._refuted(COMPLETED)

    @property
    def unconfirmed_failure(self) -> bool:
        """The run said it was done but that its checks could not confirm it (a status that
        asks the reader to look), and the eval's checks say it was not done."""
        return self._refuted(UNCONFIRMED)

    def _refuted(self, status: str) -> bool:
        """The run ended ``status`` and the checks, all of them made, failed."""
        return self.status == status and not self.passed and not self.check_error

    def as_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "case": self.case,
            "attempt": self.attempt,
            "tier": self.tier,
            "pack": self.pack,
            "status": self.status,
            "passed": self.passed,
            "false_success": self.false_success,
            "unconfirmed_failure": self.unconfirmed_failure,
            "checks": [c.as_json() for c in self.checks],
            "steps": self.steps,
            "tokens": self.tokens,
            "prompt_tokens": self.prompt_tokens,
            "cost_usd": self.cost_usd,
            "wall_s": self.wall_s,
            "run_id": self.run_id,
            "runlog": self.runlog,
            "model": self.model,
            "backend": self.backend,
            "error": dict(self.error) if self.error else None,
            "finished": self.finished,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptRecord:
        """A record read back; KeyError or ValueError when a needed key is missing or wrong."""
        known = {*cls.__struct_fields__, "false_success", "unconfirmed_failure"}
        cost = data.get("cost_usd")
        error = data.get("error")
        prompt = data.get("prompt_tokens")
        return cls(
            case=str(data["case"]),
            attempt=int(data["attempt"]),
            tier=str(data.get("tier", "")),
            pack=str(data.get("pack", "")),
            status=str(data["status"]),
            passed=bool(data["passed"]),
            checks=tuple(CheckResult.from_json(c) for c in data.get("checks") or ()),
            steps=int(data.get("steps") or 0),
            tokens=int(data.get("tokens") or 0),
            cost_usd=None if cost is None else float(cost),
            wall_s=float(data.get("wall_s") or 0.0),
            run_id=str(data.get("run_id", "")),
            runlog=str(data.get("runlog", "")),
            finished=str(data.get("finished", "")),
            model=data.get("model"),
            backend=data.get("backend"),
            error={str(k): str(v) for k, v in error.items()} if isinstance(error, dict) else None,
            prompt_tokens=None if prompt is None else int(prompt),
            extra={k: v for k, v in data.items() if k not in known},
        )
