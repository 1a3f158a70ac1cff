"""How fabric picks a model (``select_model``) among what one backend offers:

1. **A named model** (``--model``, ``FABRIC_MODEL``, or what the pack's model key maps to in
   the backend's ``models`` table or in ``llm.models``) is used when the backend has it, by
   exact name or Ollama-style (``llama3.1`` and ``llama3.1:latest`` are the same model), even
   when its tool support is not known and even when it is larger than the selection budget. If
   the backend reports that it cannot call tools, or that it is an embedding model, fabric stops
   with an error that names it and the tool-capable models the backend does have: it is never
   used silently.
2. **Otherwise** (no name, the name ``auto``, or a name the backend does not have, which the
   reason says) fabric picks the best chat model there: never an embedding model, never one
   known not to call tools. Models known to call tools rank before models whose tool support is
   not known; within a rank the largest model within ``llm.selection.max_params_b`` billion
   parameters (default 16) wins, models of unknown size come after those of known size, and
   equal sizes go by name. Models over the budget are not picked (``fabric models`` lists them
   and why).
3. **Nothing usable**: an error that says what the backend has and what to do (pull a
   tool-capable model such as ``qwen2.5-coder:7b``, name a larger one, or raise the budget).

With ``llm.selection.probe_tools`` on, a picked model whose tool support is not known is first
asked for one tiny tool call; one that does not call the tool counts as unable to call tools: a
named model then fails as in 1, an automatic pick moves on to the next candidate. With
``llm.backend: auto`` the backends of ``llm.auto`` are tried in order, and one that cannot be
reached or has nothing usable is skipped (see ``fabric.application.resolve``).
"""

from __future__ import annotations

from collections.abc import Sequence

from fabric.config.schema import SelectionSettings
from fabric.domain.errors import ModelError, ModelNotFoundError, ModelToolsUnsupportedError
from fabric.domain.models import ModelInfo

SUGGESTED = "qwen2.5-coder:7b"
"""A small tool-capable model to suggest when a backend has none."""

Verdicts = list[tuple[ModelInfo, str]]


def same_model(a: str, b: str) -> bool:
    """Ollama-style name equality: a name without a tag means ``:latest``."""
    return a == b or a.removesuffix(":latest") == b.removesuffix(":latest")


def select_model(
    models: Sequence[ModelInfo], wanted: str | None, selection: SelectionSettings
) -> tuple[ModelInfo, str, Verdicts]:
    """Pick a model by the rule in this module's docstring: (chosen, reason, verdicts)."""
    if wanted == "auto":
        wanted = None
    budget = selection.max_params_b
    where = models[0].backend if models else "the backend"
    named = find_model(models, wanted) if wanted else None
    if named is not None and (named.tools is False or named.embedding_only):
        why = "is an embedding model" if named.embedding_only else "cannot call tools"
        raise ModelToolsUnsupportedError(
            f"model {named.name} on {where} {why}, and fabric's runs need tool calls",
            hint=_pick_hint(models, budget),
        )
    candidates = [m for m in models if _usable(m) and (m is named or _fits(m, budget))]
    ranked = sorted(candidates, key=_rank)
    chosen = named or (ranked[0] if ranked else None)
    if chosen is None:
        raise nothing_usable(models, wanted, where, budget)
    verdicts = [(m, _verdict(m, chosen, named, budget)) for m in models]
    if named is not None:
        reason = f"configured model {chosen.name} is on {where}"
        if chosen.tools is None:
            reason += " (whether it calls tools is not known)"
        return chosen, reason, verdicts
    reason = f"picked {chosen.name}: {_why(chosen, ranked, budget)}"
    if wanted:
        reason = f"configured model {wanted} is not on {where}; {reason}"
    return chosen, reason, verdicts


def find_model(models: Sequence[ModelInfo], wanted: str) -> ModelInfo | None:
    """The model named ``wanted``: exactly, else Ollama-style (``x`` is ``x:latest``)."""
    exact = [m for m in models if m.name == wanted]
    return next(iter(exact or [m for m in models if same_model(m.name, wanted)]), None)


def _usable(m: ModelInfo) -> bool:
    return not m.embedding_only and m.tools is not False


def _fits(m: ModelInfo, budget: float | None) -> bool:
    return budget is None or m.parameters_b is None or m.parameters_b <= budget


def _rank(m: ModelInfo) -> tuple[bool, bool, float, str]:
    return (m.tools is not True, m.parameters_b is None, -(m.parameters_b or 0.0), m.name)


def size(m: ModelInfo) -> str:
    """``8.0B``, ``500M``, or ``size unknown``."""
    if m.parameters_b is None:
        return "size unknown"
    if m.parameters_b < 1:
        return f"{m.parameters_b * 1000:.0f}M"
    return f"{m.parameters_b:.1f}B"


def _describe(m: ModelInfo) -> str:
    tools = {True: "tools", False: "no tools", None: "tools unknown"}[m.tools]
    return f"{tools}, {size(m)}"


def _verdict(m: ModelInfo, chosen: ModelInfo, named: ModelInfo | None, budget: float | None) -> str:
    if m is chosen:
        return f"{_describe(m)}: picked" + (" (named)" if m is named else "")
    if m.embedding_only:
        return "embedding model: never picked"
    if m.tools is False:
        return "no tool support: not picked"
    if not _fits(m, budget):
        return f"{size(m)}: over the {budget:g}B budget"
    return f"{_describe(m)}: usable, not picked"


def _why(chosen: ModelInfo, ranked: Sequence[ModelInfo], budget: float | None) -> str:
    tools = "calls tools" if chosen.tools else "no model there is known to call tools"
    parts = [tools, size(chosen)]
    within = f" within the {budget:g}B budget" if budget else ""
    peers = [m for m in ranked if m.tools is chosen.tools]
    bigger = any((m.parameters_b or 0) > (chosen.parameters_b or 0) for m in ranked)
    if len(ranked) == 1:
        parts.append(f"the only usable model{within}")
    elif len(peers) == 1 and chosen.tools:
        parts.append("the only one known to call tools")
    elif chosen.parameters_b is not None:
        parts.append(f"the largest{' known to call tools' if bigger else ''}{within}")
    return ", ".join(parts)


def _pick_hint(models: Sequence[ModelInfo], budget: float | None) -> str:
    capable = [m.name for m in sorted(models, key=_rank) if m.tools is True and _fits(m, budget)]
    if capable:
        return (
            f"use a model that calls tools, e.g. {', '.join(capable[:5])} (--model or "
            "FABRIC_MODEL); `fabric models` lists them"
        )
    return (
        f"pull a tool-capable model (for Ollama: `ollama pull {SUGGESTED}`) and name it with "
        "--model or FABRIC_MODEL; `fabric models` shows what each backend has"
    )


def nothing_usable(
    models: Sequence[ModelInfo], wanted: str | None, where: str, budget: float | None
) -> ModelError:
    missing = f"configured model {wanted} is not on {where}, and " if wanted else ""
    pull = wanted or SUGGESTED
    if not models:
        return ModelNotFoundError(
            f"{missing}{where} has no models",
            hint=f"pull one (for Ollama: `ollama pull {pull}`), or use another backend with "
            "--backend or FABRIC_BACKEND",
        )
    over = [m for m in models if _usable(m) and not _fits(m, budget)]
    if over:
        names = ", ".join(f"{m.name} ({size(m)})" for m in over)
        return ModelNotFoundError(
            f"{missing}no model on {where} fits the {budget:g}B selection budget: {names}",
            hint="name one with --model or FABRIC_MODEL, raise llm.selection.max_params_b, or "
            f"pull a smaller tool-capable model (for Ollama: `ollama pull {SUGGESTED}`)",
        )
    unable = [m.name for m in models if not m.embedding_only]
    if unable:
        return ModelToolsUnsupportedError(
            f"{missing}no model on {where} can call tools: {', '.join(unable)}",
            hint=f"pull a tool-capable model (for Ollama: `ollama pull {pull}` or "
            "`ollama pull llama3.1:8b`) and name it with --model or FABRIC_MODEL",
        )
    return ModelNotFoundError(
        f"{missing}{where} has only embedding models: {', '.join(m.name for m in models)}",
        hint=f"pull a chat model that calls tools (for Ollama: `ollama pull {pull}`)",
    )
