"""Tools are typed Python functions.

``FunctionTool(fn)`` reads ``fn``'s signature and Google-style docstring once, builds a pydantic
model of its parameters, and from that the JSON Schema the model sees. Calls are validated
against the same model before ``fn`` runs. The first parameter, if annotated ``ToolContext``,
receives the run's context and is not shown to the model. A parameter annotated
``Annotated[T, PACK_SETTING]`` is the pack's to set (``bind``), else its default: never shown.

    def read_file(ctx: ToolContext, path: str, max_lines: int = 400) -> str:
        '''Read a text file from the workspace.

        Args:
            path: File path relative to the workspace root.
            max_lines: Stop after this many lines.
        '''
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

from msgspec import Struct
from msgspec.structs import replace
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from fabric.application.context import ToolContext
from fabric.domain.errors import ToolArgumentError
from fabric.domain.models import ToolSpec

_INLINE = "__fabric_inline__"
_REPEAT_UNSAFE = "__fabric_repeat_unsafe__"
_READS_ONLY = "__fabric_reads_only__"
PACK_SETTING = "fabric:pack-setting"
"""Marks a tool parameter the model never sees: ``replace: Annotated[bool, PACK_SETTING] =
True`` takes the pack's ``bind`` value, else its default (e.g. whether write_file may replace
an existing file)."""
F = TypeVar("F", bound=Callable[..., Any])
ToolFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Keyword Args|Keyword Arguments|Returns?|Raises|Yields?|"
    r"Examples?|Notes?|Warnings?|See Also|Todo|Attributes|References):\s*$"
)
_ARG_SECTIONS = ("Args", "Arguments", "Parameters", "Keyword Args", "Keyword Arguments")
_ARG = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument texts."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section, current, indent = None, None, 0
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section, current = header.group(1), None
            continue
        if section is None:
            summary.append(line)
        elif section in _ARG_SECTIONS and line.strip():
            this_indent = len(line) - len(line.lstrip())
            match = _ARG.match(line)
            if match and (current is None or this_indent <= indent):
                current, indent = match.group(1), this_indent
                args[current] = match.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), args


class _Shape(Struct, frozen=True):
    """What ``FunctionTool`` reads from a function: the same for every tool made from it."""

    wants_ctx: bool
    ctx_name: str | None
    bound: tuple[str, ...]
    """Parameters the pack sets (``bind``)."""
    names: dict[str, str]
    params: type[BaseModel]
    spec: ToolSpec


class FunctionTool:
    """A ``Tool`` made from a typed function (sync or async)."""

    def __init__(
        self, fn: ToolFunction, *, name: str | None = None, bind: Mapping[str, Any] | None = None
    ) -> None:
        """``bind`` fixes parameters (such as a pack's settings) that the model neither sees
        nor sets; names not in ``fn``'s signature are ignored."""
        self._fn = fn
        self._inline = bool(getattr(fn, _INLINE, False))
        self._is_async = inspect.iscoroutinefunction(fn)
        bound = frozenset(bind or ())
        try:
            hash(fn)
        except TypeError:
            shape = _shape_of(fn, name, bound)
        else:
            shape = _cached_shape(fn, name, bound)
        self._wants_ctx, self._ctx_name = shape.wants_ctx, shape.ctx_name
        self._names, self._params = shape.names, shape.params
        self._bound: dict[str, Any] = {n: bind[n] for n in shape.bound} if bind else {}
        spec = shape.spec  # each tool its own schema: a caller may change its copy
        self._spec = replace(spec, parameters=copy.deepcopy(spec.parameters))

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check arguments against the signature; raise ToolArgumentError listing problems."""
        try:
            parsed = self._params.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ToolArgumentError(
                f"invalid arguments for {self._spec.name}: {problems}",
                hint=f"call {self._spec.name} again with arguments matching its schema",
            ) from None
        return {param: getattr(parsed, field) for field, param in self._names.items()}

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        kwargs = {**self.validate(arguments), **self._bound}
        if self._ctx_name:
            kwargs[self._ctx_name] = ctx
        call_args = (ctx,) if self._wants_ctx else ()
        if self._is_async:
            result = await self._fn(*call_args, **kwargs)
        elif self._inline:
            result = self._fn(*call_args, **kwargs)
        else:
            result = await asyncio.to_thread(self._fn, *call_args, **kwargs)
        if isinstance(result, str):
            return result
        return json.dumps(to_jsonable_python(result, fallback=str), ensure_ascii=False)


def _shape_of(fn: ToolFunction, name: str | None, bound: frozenset[Any]) -> _Shape:
    """Read ``fn``'s signature and docstring; build its arguments model and JSON Schema."""
    description, arg_docs = parse_docstring(fn.__doc__)
    try:
        hints = get_type_hints(fn, include_extras=True)
    except NameError as exc:
        raise TypeError(
            f"tool {getattr(fn, '__name__', fn)}: cannot resolve its type hints ({exc}); "
            "define the types it uses at module level"
        ) from None
    fields: dict[str, Any] = {}
    wants_ctx = False
    ctx_name: str | None = None
    bound_here: list[str] = []
    names: dict[str, str] = {}
    for index, param in enumerate(inspect.signature(fn).parameters.values()):
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            if index == 0:
                wants_ctx = True
            elif param.kind is param.POSITIONAL_ONLY:
                raise TypeError(f"tool {fn.__name__}: a ToolContext parameter must be first")
            else:
                ctx_name = param.name
            continue
        if param.name in bound:
            bound_here.append(param.name)
            continue
        if _is_pack_setting(annotation):
            if param.default is param.empty:
                raise TypeError(f"tool {fn.__name__}: pack setting {param.name} needs a default")
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__}: *args/**kwargs cannot be described")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"tool {fn.__name__}: positional-only parameters cannot be set")
        default = ... if param.default is param.empty else param.default
        # Fields get neutral names and the parameter name as alias, so a parameter may be
        # called anything (``schema``, ``json``, ``model_name``) without clashing with
        # pydantic's own attributes.
        field_name = f"p{len(fields)}"
        names[field_name] = param.name
        fields[field_name] = (
            annotation,
            Field(default, alias=param.name, description=arg_docs.get(param.name) or None),
        )
    tool_name = name or fn.__name__
    params: type[BaseModel] = create_model(
        f"{tool_name}_arguments",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )
    safe = not getattr(fn, _REPEAT_UNSAFE, False)
    looks = bool(getattr(fn, _READS_ONLY, False))
    spec = ToolSpec(tool_name, description or tool_name, json_schema_of(params), safe, looks)
    return _Shape(wants_ctx, ctx_name, tuple(bound_here), names, params, spec)


_cached_shape = functools.lru_cache(maxsize=256)(_shape_of)
"""A function's shape, read once: a pack is built for every run and replay, and building a
pydantic model and its JSON Schema costs about a millisecond a tool."""


def _is_pack_setting(annotation: Any) -> bool:
    return get_origin(annotation) is Annotated and PACK_SETTING in get_args(annotation)[1:]


def runs_inline(fn: F) -> F:
    """Mark a sync tool as quick and bounded (a capped file read or write): it then runs on the
    event loop instead of in a worker thread, which saves ~0.1-0.2 ms a call. Anything that can
    take long (walking trees, searching, waiting on I/O) must stay in a thread."""
    setattr(fn, _INLINE, True)
    return fn


def repeat_unsafe(fn: F) -> F:
    """Mark a tool whose call may do harm when run twice (a command, an append): a durable run
    driven again does not repeat a cut-off call of it without asking a person (ADR 0020)."""
    setattr(fn, _REPEAT_UNSAFE, True)
    return fn


def reads_only(fn: F) -> F:
    """Mark a tool whose call only looks (a read, a listing, a search): a durable run records
    its result with the next step instead of in a step of its own (ADR 0020)."""
    setattr(fn, _READS_ONLY, True)
    return fn


def json_schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON Schema without pydantic's ``title`` noise (it costs tokens and tells the
    model nothing) and without the class docstring."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema
