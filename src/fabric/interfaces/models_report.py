"""What every backend offers and which model a run would use, as plain data: shared by
``fabric models``, ``fabric packs`` and their HTTP twins."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fabric.config.loader import LoadedConfig
from fabric.config.schema import Backend as BackendSettings
from fabric.config.schema import ModelOptions
from fabric.domain.errors import FabricError
from fabric.domain.models import ModelInfo
from fabric.infrastructure.llm.backends import base_url_of, window_of
from fabric.interfaces.compose import Runner, build_runner


def _row(
    info: ModelInfo, verdict: str, backend: BackendSettings, options: ModelOptions
) -> dict[str, Any]:
    return {
        "name": info.name,
        "tools": info.tools,
        "embedding_only": info.embedding_only,
        "context_length": info.context_length,
        "context_used": window_of(info, backend, options),
        "parameters_b": info.parameters_b,
        "family": info.family,
        "verdict": verdict,
    }


async def will_use(runner: Runner, pack: str) -> dict[str, Any]:
    """The model a run of ``pack`` would use now and why (the resolution ``fabric run`` makes:
    the configured model may be missing and another picked), or why none would do."""
    try:
        chosen = await runner.resolve(pack)
    except FabricError as exc:
        return {"error": {"code": exc.code, "message": exc.message, "hint": exc.hint}}
    return {"backend": chosen.backend, "model": chosen.model, "reason": chosen.reason}


async def packs_report(runner: Runner, names: Iterable[str]) -> list[dict[str, Any]]:
    """Each pack as ``fabric packs`` and ``GET /packs`` list it: name, description, tools,
    model key, the model name it asks for (``asks``) and what a run would use (``will_use``).
    A pack that cannot be built raises its ``ConfigError``."""
    rows = []
    for name in names:
        row = runner.pack_summary(name)
        row["asks"] = runner.model_for(runner.pack(name))
        row["will_use"] = await will_use(runner, name)
        rows.append(row)
    return rows


async def gather(
    loaded: LoadedConfig,
    pack: str,
    backend: str | None,
    *,
    on_status: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Everything `fabric models` shows, as plain data (also its --json output)."""
    runner = build_runner(loaded, on_status=on_status)
    llm = loaded.config.llm
    names = [backend] if backend and backend != "auto" else list(llm.backends)
    report: dict[str, Any] = {"pack": pack, "backends": [], "pick": {}}
    try:
        for name in names:
            settings = runner.backends.settings(name)
            entry: dict[str, Any] = {
                "name": name,
                "kind": settings.kind,
                "url": base_url_of(settings),
                "models": [],
            }
            report["backends"].append(entry)
            try:
                resolution = await runner.resolve(pack, backend=name, fresh=True)
            except FabricError as exc:
                entry["error"] = {"code": exc.code, "message": exc.message, "hint": exc.hint}
                try:
                    listed = await runner.backends.catalog(name).list_models()
                except FabricError:
                    continue
                entry["models"] = [_row(m, "", settings, runner.backends.options(m.name))
                                   for m in listed]  # fmt: skip
                continue
            entry["models"] = [_row(m, v, settings, runner.backends.options(m.name))
                               for m, v in resolution.considered]  # fmt: skip
            entry["pick"] = {"model": resolution.model, "reason": resolution.reason}
        try:
            chosen = await runner.resolve(pack, backend=backend, fresh=True)
        except FabricError as exc:
            report["pick"] = {"error": {"code": exc.code, "message": exc.message,
                                        "hint": exc.hint}}  # fmt: skip
        else:
            report["pick"] = {
                "backend": chosen.backend,
                "model": chosen.model,
                "reason": chosen.reason,
                "skipped": [{"backend": b, "why": w} for b, w in chosen.skipped],
            }
    finally:
        await runner.aclose()
    return report
