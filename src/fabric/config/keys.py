"""Which keys and kinds the schema accepts at a key path, for messages about a mistake there
(an unknown key, an unknown ``kind``). Paths are pydantic's: a tagged union's member is named
by its tag (``llm.backends.mine.openai.base_url``)."""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel


def _shape_at(root: type[BaseModel], loc: Sequence[str | int]) -> Any:
    """The type of the value at pydantic's ``loc`` (union tags included): a model, a union
    of models whose tag the path does not name, another type; None when the path leaves
    the schema."""
    shape: Any = root
    for part in loc:
        shape = _unwrapped(shape)
        if isinstance(shape, type) and issubclass(shape, BaseModel):
            field = shape.model_fields.get(str(part))
            shape = field.annotation if field else None
        elif typing.get_origin(shape) in (dict, list):
            shape = typing.get_args(shape)[-1]  # part is a key (a pack's name) or an index
        else:  # a tagged union: part is the tag
            shape = next((m for m in _members(shape) if _tag_of(m) == part), None)
        if shape is None:
            return None
    return _unwrapped(shape)


def keys_at(root: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys the mapping at ``loc`` accepts (the first member's, for an untagged union of
    models); none when it is no model."""
    shape = _shape_at(root, loc)
    model = (_members(shape) or [shape])[0]
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def kinds_at(root: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The ``kind`` values a tagged union at ``loc`` accepts (``openai``, ``ollama``, ...)."""
    return [tag for model in _members(_shape_at(root, loc)) for tag in [_tag_of(model)] if tag]


def _unwrapped(shape: Any) -> Any:
    """``X`` for ``Annotated[X, ...]`` and ``X | None``."""
    while typing.get_origin(shape) is typing.Annotated:
        shape = typing.get_args(shape)[0]
    if typing.get_origin(shape) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(shape) if a is not type(None)]
        return _unwrapped(rest[0]) if len(rest) == 1 else shape
    return shape


def _members(shape: Any) -> list[type[BaseModel]]:
    """The models of a union (none for anything else)."""
    if typing.get_origin(shape) not in (typing.Union, types.UnionType):
        return []
    args = [_unwrapped(a) for a in typing.get_args(shape)]
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]


def _tag_of(model: type[BaseModel]) -> str | None:
    """The ``kind`` a member of a tagged union has (``Literal["openai"]``), if any."""
    field = model.model_fields.get("kind")
    args = typing.get_args(field.annotation) if field else ()
    return args[0] if len(args) == 1 and isinstance(args[0], str) else None
