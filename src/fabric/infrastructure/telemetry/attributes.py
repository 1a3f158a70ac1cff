"""What the spans of a run say about its runlog events (ADR 0022): the OpenTelemetry GenAI
semantic conventions' attributes (``gen_ai.*``, ``error.type``, ``server.*``), fabric's own
(``fabric.*``), and, when content is captured, the messages and tool data in the conventions'
JSON shapes. Plain data in, plain data out: nothing here imports OpenTelemetry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from msgspec import Struct

from fabric.domain.secrets import Secrets

from .content import CONTENT, as_json

Value = str | bool | int | float | Sequence[str]
Attrs = dict[str, Value]

DONE = frozenset({"completed", "completed_unconfirmed"})
"""Run statuses that are not errors: the work was done (``fabric run`` exits 0 or 3)."""
_PROVIDERS = {"embedded": "llama.cpp"}
"""A backend kind whose provider has another name (the others are named as their kind)."""
_EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "llm_retry": ("attempt", "of", "wait_s", "status_code"),
    "policy_decision": ("verdict", "rule"),
    "approval_requested": ("timeout_s",),
    "approval": ("approved", "by", "scope"),
    "verification": ("check", "ok", "skipped", "confirms", "exit_code", "duration_ms"),
    "brief": ("duration_ms", "room_chars"),
    "nudge": (),
    "context_compacted": ("window", "tokens_before", "tokens_after"),
    "plan": ("call_id", "counts"),
}
"""The runlog events kept as span events, with the fields that say what happened."""
_EVENT_CONTENT: dict[str, tuple[str, ...]] = {
    "verification": ("summary", "evidence"),
    "nudge": ("message",),
    "brief": ("text",),
    "approval_requested": ("arguments",),
    "plan": ("items", "explanation"),
}
"""Their fields that are content, kept only when content is captured."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def nanos(ts: Any) -> int | None:
    """A runlog ``ts`` (UTC, ISO 8601) as nanoseconds since the epoch; None if it is none."""
    if not isinstance(ts, str):
        return None
    try:
        moment = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


class RunFacts(Struct, frozen=True):
    """What a run's spans repeat: its pack, model and where the model runs."""

    run_id: str
    pack: str
    model: str | None
    backend: str | None
    provider: str | None
    address: str | None = None
    port: int | None = None

    @classmethod
    def of(cls, started: Mapping[str, Any], run_id: str) -> RunFacts:
        """From a run's ``run_started`` (an empty mapping when it is not known)."""
        backend = mapping(started.get("backend"))
        kind = backend.get("kind")
        url = backend.get("base_url")
        parts = urlsplit(url) if isinstance(url, str) else None
        try:
            port = parts.port if parts is not None else None
        except ValueError:
            port = None
        return cls(
            run_id=run_id,
            pack=str(started.get("pack") or ""),
            model=_text(started.get("model")),
            backend=_text(backend.get("name")),
            provider=_PROVIDERS.get(kind, kind) if isinstance(kind, str) else None,
            address=parts.hostname if parts is not None else None,
            port=port or (_default_port(parts.scheme) if parts and parts.hostname else None),
        )

    def switched(self, to: Mapping[str, Any]) -> RunFacts:
        """After ``llm_fallback`` to ``to`` (backend, model): another backend's kind and address
        are not in the log, so its name stands for the provider."""
        backend = _text(to.get("backend"))
        if backend is None or backend == self.backend:
            return RunFacts(self.run_id, self.pack, _text(to.get("model")), self.backend,
                            self.provider, self.address, self.port)  # fmt: skip
        return RunFacts(self.run_id, self.pack, _text(to.get("model")), backend, backend)


def run_attributes(facts: RunFacts, started: Mapping[str, Any]) -> Attrs:
    """The ``invoke_agent`` span's attributes when it starts (``run_started`` or, for a resumed
    run, ``run_resumed`` with what is known of its start)."""
    parent = mapping(started.get("parent"))
    return _present(
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": facts.pack,
            "gen_ai.conversation.id": facts.run_id,
            "gen_ai.provider.name": facts.provider,
            "gen_ai.request.model": facts.model,
            "fabric.run_id": facts.run_id,
            "fabric.backend": facts.backend,
            "fabric.parent_run_id": parent.get("run_id"),
            "fabric.delegation.depth": parent.get("depth"),
            "fabric.replay_of": started.get("replay_of"),
            "fabric.durable": started.get("durable"),
            **_server(facts),
        }
    )


def resumed_attributes(event: Mapping[str, Any]) -> Attrs:
    """A resumed run's ``invoke_agent`` span: where it went on from, and why it had stopped."""
    return _present(
        {
            "fabric.resumed_from_step": event.get("from_step"),
            "fabric.resume_reason": event.get("reason"),
        }
    )


def end_attributes(end: Mapping[str, Any]) -> tuple[Attrs, tuple[str, str] | None]:
    """The ``invoke_agent`` span's attributes from how the run ended (``run_finished`` or
    ``run_resumed.ended``), and its error (``error.type``, description) unless it was done."""
    usage = mapping(end.get("usage"))
    cost = mapping(end.get("cost"))
    status = str(end.get("status") or "")
    attrs = _present(
        {
            "fabric.run.status": status,
            "fabric.run.steps": end.get("steps"),
            "fabric.run.duration_s": end.get("duration_s"),
            "fabric.run.cost_usd": cost.get("usd"),
            "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
            "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
        }
    )
    return attrs, (None if status in DONE else failure(end, status or "unknown"))


def failure(event: Mapping[str, Any], fallback: str) -> tuple[str, str]:
    """``error.type`` and a description from an event's ``error`` (code, message), or
    ``fallback`` as both."""
    error = mapping(event.get("error"))
    code = _text(error.get("code")) or fallback
    return code, _text(error.get("message")) or code


def chat_attributes(facts: RunFacts, event: Mapping[str, Any]) -> Attrs:
    """A ``chat`` span's attributes when the request is sent (``llm_request``)."""
    return _present(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": facts.provider,
            "gen_ai.request.model": facts.model,
            "gen_ai.conversation.id": facts.run_id,
            "fabric.run_id": facts.run_id,
            "fabric.step": event.get("step"),
            "fabric.backend": facts.backend,
            **_server(facts),
        }
    )


def response_attributes(event: Mapping[str, Any]) -> Attrs:
    """A ``chat`` span's attributes from the model's reply (``llm_response``)."""
    usage = mapping(event.get("usage"))
    reason = _text(event.get("finish_reason"))
    return _present(
        {
            "gen_ai.response.model": event.get("model"),
            "gen_ai.response.finish_reasons": [reason] if reason else None,
            "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
            "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
            "fabric.duration_ms": event.get("duration_ms"),
            "fabric.tool_calls_from_text": event.get("tool_calls_from_text"),
        }
    )


def tool_attributes(event: Mapping[str, Any]) -> Attrs:
    """An ``execute_tool`` span's attributes when the call is made (``tool_call``)."""
    return _present(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.get("name"),
            "gen_ai.tool.call.id": event.get("call_id"),
            "gen_ai.tool.type": "function",
            "fabric.run_id": event.get("run_id"),
            "fabric.step": event.get("step"),
        }
    )


def result_attributes(event: Mapping[str, Any]) -> Attrs:
    """An ``execute_tool`` span's attributes from its result (``tool_result``)."""
    children = event.get("child_run_ids")
    return _present(
        {
            "fabric.tool.ok": event.get("ok"),
            "fabric.tool.artifact": event.get("artifact"),
            "fabric.duration_ms": event.get("duration_ms"),
            "fabric.child_run_ids": [str(c) for c in children] if children else None,
        }
    )


def event_attributes(event: Mapping[str, Any], *, capture: bool) -> Attrs | None:
    """A span event's attributes for a runlog event that is no span of its own (None: the
    event is not kept)."""
    kind = str(event.get("kind"))
    fields = _EVENT_FIELDS.get(kind)
    if fields is None:
        return None
    if capture:
        fields = (*fields, *_EVENT_CONTENT.get(kind, ()))
    attrs = _present({f"fabric.{name}": _scalar(event.get(name)) for name in fields})
    if isinstance(event.get("error"), Mapping):
        attrs["error.type"] = failure(event, kind)[0]
    return attrs


def redacted(attrs: Attrs, secrets: Secrets) -> Attrs:
    """``attrs`` with every secret taken out of its texts: content as JSON, the rest as text."""
    if not secrets:
        return attrs
    out: Attrs = {}
    for key, value in attrs.items():
        if isinstance(value, str):
            out[key] = secrets.redact_json(value) if key in CONTENT else secrets.redact(value)
        elif isinstance(value, list | tuple) and any(isinstance(v, str) for v in value):
            out[key] = [secrets.redact(str(v)) for v in value]
        else:
            out[key] = value
    return out


def _server(facts: RunFacts) -> dict[str, Any]:
    return {"server.address": facts.address, "server.port": facts.port}


def _default_port(scheme: str) -> int | None:
    return {"http": 80, "https": 443}.get(scheme)


def _present(values: Mapping[str, Any]) -> Attrs:
    """The values an attribute can hold; None and other shapes left out."""
    return {key: value for key, value in values.items() if _holdable(value)}


def _holdable(value: Any) -> bool:
    if isinstance(value, str | bool | int | float):
        return True
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def _scalar(value: Any) -> Any:
    return value if isinstance(value, str | bool | int | float | None) else as_json(value)


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping (a JSON object), else an empty one."""
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
