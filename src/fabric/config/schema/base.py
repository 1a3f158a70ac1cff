"""What every settings model of fabric.yaml shares."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    # defer_build: validators are built on first use, not at import (~25 ms off every start).
    # An empty list or dict default is written as such, not as default_factory=list: pydantic
    # copies it for each instance all the same, and asks for a factory's signature (for
    # list, a parse of its text signature through tokenize: ~14 ms the first time, ADR 0031)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class KeyProblem(ValueError):
    """A validator's complaint about a key below the field it checks (a JSON Schema's
    ``properties.n.minimum`` under ``finish_schema``): ``loc`` is the path from the field, so
    the error points at that key's line (``where.validation_error``)."""

    def __init__(self, message: str, loc: Sequence[str | int], hint: str = "") -> None:
        super().__init__(message)
        self.loc = tuple(loc)
        self.hint = hint
