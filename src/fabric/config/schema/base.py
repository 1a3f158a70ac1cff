"""What every settings model of fabric.yaml shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    # defer_build: validators are built on first use, not at import (~25 ms off every start)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
