"""What every backend offers and which model a run would use, as plain data: shared by
``fabric models`` and ``GET /models``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fabric.config.loader import LoadedConfig
from fabric.domain.errors import FabricError
from fabric.domain.models import ModelInfo
from fabric.infrastructure.llm.backends import base_url_of
from fabric.interfaces.compose import build_runner


def _row(info: ModelInfo, verdict: str) -> dict[str, Any]:
    return {
        "name": info.name,
        "tools": info.tools,
        "embedding_only": info.embedding_only,
        "context_length": info.context_length,
        "parameters_b": info.parameters_b,
        "family": info.family,
        "verdict": verdict,
    }


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
                entry["models"] = [_row(m, "") for m in listed]
                continue
            entry["models"] = [_row(m, v) for m, v in resolution.considered]
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
