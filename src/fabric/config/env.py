"""The environment's layer: ``FABRIC_*`` variables over the configuration files (ADR 0024).

The variables fabric had before layers keep their meaning:

- ``FABRIC_BACKEND``: ``llm.backend``.
- ``FABRIC_BASE_URL``: the ``base_url`` of the backend ``llm.backend`` names (``openai`` when
  that is ``auto``), which it also selects; a backend without a URL (embedded) is an error.
- ``FABRIC_MODEL``: the model of every model key (``llm.models``, the keys packs ask for, and
  each backend's own ``models`` table).
- ``FABRIC_DATABASE_URL``: ``serve.durable_database``.

Any other key: ``FABRIC_<SECTION>__<KEY>[__<KEY>...]``, the key path in capitals with ``__``
between its parts, set to a YAML value as it would follow the key in ``fabric.yaml``
(``FABRIC_LLM__TEMPERATURE=0.2``, ``FABRIC_SERVE__PORT=9000``,
``FABRIC_LLM__AUTO='[ollama]'``). Key parts are taken in lower case; top-level keys
(``runs_dir``, ``default_pack``) have no such form. Two variables that set one key are an
error. An empty variable counts as unset.

Not part of the layer: ``FABRIC_CONFIG`` (which project file), ``FABRIC_API_KEY`` and
``FABRIC_API_TOKEN`` (secrets the config names in ``api_key_env`` and ``serve.token_env``, never
values of it), and ``FABRIC_GGUF`` (the embedded model's file when ``model_path`` is unset,
read where the file is needed, like ``OLLAMA_HOST`` for Ollama), and ``FABRIC_MEMORY_DB`` (the
memory store's file, ``config/data.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import yaml

from fabric.domain.errors import ConfigError

from .layers import ENVIRONMENT, Layer, Setting, UniqueKeyLoader, settings_layer
from .schema import EmbeddedBackend, FabricConfig, LLMSettings

BACKEND_ENV = "FABRIC_BACKEND"
BASE_URL_ENV = "FABRIC_BASE_URL"
MODEL_ENV = "FABRIC_MODEL"
DATABASE_ENV = "FABRIC_DATABASE_URL"
PREFIX = "FABRIC_"
SEPARATOR = "__"


def env_layer(env: Mapping[str, str], below: FabricConfig) -> Layer | None:
    """The layer of ``env``'s ``FABRIC_*`` variables over the files' config ``below`` (what
    ``FABRIC_BASE_URL`` and ``FABRIC_MODEL`` apply to); None when none is set."""
    return settings_layer(ENVIRONMENT, [*_general(env), *_named(env, below)])


def _general(env: Mapping[str, str]) -> Iterator[Setting]:
    for name, given in sorted(env.items()):
        rest = name[len(PREFIX) :]
        if not name.startswith(PREFIX) or SEPARATOR not in rest or not given:
            continue
        key = tuple(rest.lower().split(SEPARATOR))
        if not all(key):
            raise ConfigError(
                f"{name}: a key path with an empty part",
                hint=f"write the path's parts with one {SEPARATOR} between them, e.g. "
                "FABRIC_LLM__TIMEOUTS__READ; or unset it",
            )
        yield Setting(key, _value(name, given), name, given)


def _value(name: str, given: str) -> object:
    try:
        return yaml.load(given, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            f"{name}={given!r} is not a YAML value: {problem}",
            hint=f"write it as it would follow the key in fabric.yaml, or unset {name}",
        ) from None


def _named(env: Mapping[str, str], below: FabricConfig) -> Iterator[Setting]:
    backend = env.get(BACKEND_ENV)
    if backend:
        yield Setting(("llm", "backend"), backend, BACKEND_ENV, backend)
    url = env.get(BASE_URL_ENV)
    if url:
        yield from _base_url(url, backend or below.llm.backend, below.llm, selects=not backend)
    model = env.get(MODEL_ENV)
    if model:
        yield from _every_model_key(model, below)
    database = env.get(DATABASE_ENV)
    if database:
        yield Setting(("serve", "durable_database"), database, DATABASE_ENV, database)


def _base_url(url: str, name: str, llm: LLMSettings, *, selects: bool) -> Iterator[Setting]:
    name = "openai" if name == "auto" else name
    target = llm.backends.get(name)
    if target is None:
        return  # FABRIC_BACKEND names no backend: the check of llm.backend says so
    if isinstance(target, EmbeddedBackend):
        raise ConfigError(
            f"{BASE_URL_ENV} cannot apply to the {name!r} backend, which has no URL",
            hint=f"unset {BASE_URL_ENV}, or pick a server backend with --backend",
        )
    key = ("llm", "backends", name)
    yield Setting((*key, "kind"), target.kind, BASE_URL_ENV, url)  # a built-in's, if need be
    yield Setting((*key, "base_url"), url, BASE_URL_ENV, url)
    if selects:
        yield Setting(("llm", "backend"), name, BASE_URL_ENV, url)


def _every_model_key(model: str, below: FabricConfig) -> Iterator[Setting]:
    llm = below.llm
    keys = dict.fromkeys(["default", *llm.models, *(p.model for p in below.packs.values())])
    for key in keys:
        yield Setting(("llm", "models", key), model, MODEL_ENV, model)
    for name, backend in llm.backends.items():  # their own tables would win over llm.models
        for key in backend.models:
            yield Setting(("llm", "backends", name, "models", key), model, MODEL_ENV, model)
