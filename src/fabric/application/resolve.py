"""Which backend and model a run uses.

The model is picked by the rule in ``fabric.application.selection`` (re-exported here as
``select_model``). Around it:

- **Backend**: ``--backend`` / ``FABRIC_BACKEND`` (given here as ``backend``), else
  ``llm.backend``. With ``auto`` the backends of ``llm.auto`` are tried in order; one that
  cannot be reached or has nothing usable is skipped (``Resolution.skipped`` and the reason say
  why) and the next is tried. None usable: an error listing each and why.
- **Model asked for**: ``--model`` / ``FABRIC_MODEL`` (a key of the model tables, or a model
  name), else the backend's own ``models`` table for the pack's key, else ``llm.models``; the
  name ``auto`` (or no entry) lets fabric pick.
- **Tool probe** (``llm.selection.probe_tools``): a picked model whose tool support is not
  known is first asked for one tiny tool call (``probe_tools``, cached by the caller). One that
  does not call the tool counts as unable to call tools: a named model then fails with an error
  that says so, an automatic pick moves on to the next candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from msgspec import Struct
from msgspec.structs import replace

from fabric.config.schema import LLMSettings
from fabric.domain.errors import (
    ConfigError,
    ModelConnectionError,
    ModelError,
    ModelToolsUnsupportedError,
)
from fabric.domain.models import ChatRequest, ModelInfo

from .ports import ChatClient, ModelCatalog, ToolProbe
from .selection import SUGGESTED, find_model, nothing_usable, select_model

__all__ = ["Resolution", "ToolProbe", "probe_tools", "resolve_llm", "select_model"]

PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Return the current time.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}
_PROBE_ASK = "What time is it? Call the get_time tool to find out; do not answer in text."


class Resolution(Struct, frozen=True):
    """The backend and model a run will use, and why."""

    backend: str
    model: str
    info: ModelInfo | None
    reason: str
    considered: tuple[tuple[ModelInfo, str], ...] = ()
    """Every model the chosen backend offers, with the verdict on it."""
    skipped: tuple[tuple[str, str], ...] = ()
    """Backends ``auto`` tried first and did not use, with why."""


async def probe_tools(client: ChatClient) -> bool:
    """Whether the model behind ``client`` answers a trivial request with a native call of the
    one tool offered. A server that refuses tools counts as no; other errors propagate."""
    messages = [{"role": "user", "content": _PROBE_ASK}]
    try:
        response = await client.chat(ChatRequest(messages, [PROBE_TOOL]))
    except ModelToolsUnsupportedError:
        return False
    if response.tool_calls_from_text:
        return False
    return any(call.name == "get_time" for call in response.tool_calls)


def wanted_model(llm: LLMSettings, backend: str, model_key: str, model: str | None) -> str | None:
    """The model name asked for on ``backend``: ``model`` (a key of the model tables, or a
    name), else the backend's own table, else ``llm.models``; None means pick one."""
    own = llm.backends[backend].models if backend in llm.backends else {}
    key = model_key if model is None else model
    name = own.get(key) or llm.models.get(key) or model
    return None if not name or name == "auto" else name


async def resolve_llm(
    llm: LLMSettings,
    *,
    model_key: str,
    catalogs: Callable[[str], ModelCatalog],
    backend: str | None = None,
    model: str | None = None,
    probe: ToolProbe | None = None,
) -> Resolution:
    """Choose the backend and model for a run (see the module docstring).

    ``backend`` and ``model`` are the command line's (or environment's) choices, if any;
    ``catalogs(name)`` gives the catalog of a backend under ``llm.backends``.
    """
    name = backend or llm.backend
    if name != "auto":
        return await _on_backend(llm, name, model_key, catalogs, model, probe)
    skipped: list[tuple[str, str]] = []
    failures: list[ModelError | ConfigError] = []
    for candidate in llm.auto:
        try:
            found = await _on_backend(llm, candidate, model_key, catalogs, model, probe)
        except (ModelError, ConfigError) as exc:
            skipped.append((candidate, exc.message))
            failures.append(exc)
            continue
        notes = "; ".join(f"{b} skipped: {why}" for b, why in skipped)
        reason = f"{notes}; {candidate}: {found.reason}" if notes else found.reason
        return replace(found, reason=reason, skipped=tuple(skipped))
    raise _none_usable(llm, skipped, failures)


def _none_usable(
    llm: LLMSettings,
    skipped: Sequence[tuple[str, str]],
    failures: Sequence[ModelError | ConfigError],
) -> ModelError:
    listing = "\n".join(f"  - {b}: {why}" for b, why in skipped) or "  (llm.auto is empty)"
    hint = (
        f"start Ollama (`ollama serve`, then `ollama pull {SUGGESTED}`), or `pip install "
        "'agent-fabric[local]'` for the embedded model, or configure another backend with "
        "--backend or llm.backend"
    )
    message = f"no backend of llm.auto ({', '.join(llm.auto)}) has a usable model:\n{listing}"
    reached = [f for f in failures if not isinstance(f, ModelConnectionError | ConfigError)]
    if reached:  # a server answered: its advice (pull a model, name one) comes first
        return type(reached[0])(message, hint=f"{reached[0].hint}; or {hint}")
    return ModelConnectionError(message, hint=hint)


async def _on_backend(
    llm: LLMSettings,
    name: str,
    model_key: str,
    catalogs: Callable[[str], ModelCatalog],
    model: str | None,
    probe: ToolProbe | None,
) -> Resolution:
    if name not in llm.backends:
        raise ConfigError(
            f"backend {name!r} is not under llm.backends",
            hint=f"use one of: {', '.join(llm.backends)}",
        )
    wanted = wanted_model(llm, name, model_key, model)
    models = await catalogs(name).list_models()
    if not models:
        raise nothing_usable(models, wanted, name, llm.selection.max_params_b)
    probed: dict[str, bool] = {}
    while True:
        try:
            chosen, reason, verdicts = select_model(models, wanted, llm.selection)
        except ModelToolsUnsupportedError as exc:
            named = find_model(models, wanted) if wanted else None
            if named is not None and probed.get(named.name) is False:
                raise ModelToolsUnsupportedError(
                    f"model {named.name} on {name} did not call the tool it was offered when "
                    "probed (llm.selection.probe_tools), so it cannot run fabric's tasks",
                    hint=exc.hint,
                ) from exc
            raise
        if probe is None or not llm.selection.probe_tools or chosen.tools is not None:
            break
        ok = await probe(name, chosen.name)
        probed[chosen.name] = ok
        models = [replace(m, tools=ok) if m is chosen else m for m in models]
    if probed:
        verdicts = [(m, _probe_note(m, v, probed)) for m, v in verdicts]
        found = [n for n, ok in probed.items() if ok]
        failed = [n for n, ok in probed.items() if not ok]
        if found:
            reason += f"; the tool probe confirmed {found[0]} calls tools"
        if failed:
            reason += f"; the tool probe found {', '.join(failed)} did not call tools"
    return Resolution(name, chosen.name, chosen, reason, tuple(verdicts))


def _probe_note(m: ModelInfo, verdict: str, probed: dict[str, bool]) -> str:
    if m.name not in probed:
        return verdict
    if probed[m.name]:
        return f"{verdict} (tool probe: calls tools)"
    return "tool probe: no tool call: not picked"
