"""Model selection and backend resolution over what realistic backends report, the tool probe,
and the cache that keeps probe answers between runs.

The model lists are what an Ollama server with a typical set of pulled models reports (names
from `/api/tags`, capabilities and `parameter_size` from `/api/show`: "7.6B", "8.0B", "137M",
"3B", "32.8B"), and what an OpenAI-compatible server reports (`/v1/models` says nothing about
tools or size)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from fabric.application.ports import ModelCatalog
from fabric.application.resolve import Resolution, probe_tools, resolve_llm, select_model
from fabric.config.schema import LLMSettings, SelectionSettings
from fabric.domain.errors import (
    ConfigError,
    ModelAuthError,
    ModelConnectionError,
    ModelError,
    ModelNotFoundError,
    ModelToolsUnsupportedError,
)
from fabric.domain.models import ModelInfo
from fabric.infrastructure.llm.probe_cache import ProbeCache, default_path
from fabric.testing import ScriptedChatClient, reply, tool_call


def ollama(
    name: str, size: float | None, *, tools: bool | None = True, embedding: bool = False
) -> ModelInfo:
    return ModelInfo(
        name,
        "ollama",
        tools=tools,
        embedding_only=embedding,
        parameters_b=size,
        context_length=8192,
    )


CODER = ollama("qwen2.5-coder:7b", 7.6)
LLAMA = ollama("llama3.1:8b", 8.0)
EMBED = ollama("nomic-embed-text:latest", 0.137, tools=False, embedding=True)
GEMMA = ollama("gemma:2b", 3.0, tools=False)
BIG = ollama("qwen2.5:32b", 32.8)
OLLAMA_MODELS = [EMBED, GEMMA, CODER, BIG, LLAMA]
DEFAULT = SelectionSettings()


def verdicts_by_name(verdicts: Sequence[tuple[ModelInfo, str]]) -> dict[str, str]:
    return {m.name: v for m, v in verdicts}


# --- select_model: a named model ----------------------------------------------------------


def test_the_configured_model_is_picked_when_the_backend_has_it() -> None:
    chosen, reason, verdicts = select_model(OLLAMA_MODELS, "qwen2.5-coder:7b", DEFAULT)
    assert chosen is CODER
    assert reason == "configured model qwen2.5-coder:7b is on ollama"
    assert verdicts_by_name(verdicts) == {
        "nomic-embed-text:latest": "embedding model: never picked",
        "gemma:2b": "no tool support: not picked",
        "qwen2.5-coder:7b": "tools, 7.6B: picked (named)",
        "qwen2.5:32b": "32.8B: over the 16B budget",
        "llama3.1:8b": "tools, 8.0B: usable, not picked",
    }


@pytest.mark.parametrize(
    ("available", "wanted"),
    [("llama3.1:latest", "llama3.1"), ("llama3.1", "llama3.1:latest")],
)
def test_a_name_without_a_tag_is_the_latest_tag(available: str, wanted: str) -> None:
    model = ollama(available, 8.0)
    chosen, reason, _ = select_model([CODER, model], wanted, DEFAULT)
    assert chosen is model
    assert reason.startswith(f"configured model {available} is on ollama")


def test_an_exact_name_wins_over_the_latest_equivalence() -> None:
    tagged, bare = ollama("mistral:latest", 7.2), ollama("mistral", 7.2)
    assert select_model([tagged, bare], "mistral", DEFAULT)[0] is bare


def test_a_named_model_of_unknown_tool_support_is_used_and_the_reason_says_so() -> None:
    served = [ModelInfo("Qwen/Qwen2.5-Coder-7B-Instruct", "vllm"), ModelInfo("other", "vllm")]
    chosen, reason, _ = select_model(served, "Qwen/Qwen2.5-Coder-7B-Instruct", DEFAULT)
    assert chosen is served[0]
    assert "whether it calls tools is not known" in reason


def test_a_named_model_over_the_budget_is_used() -> None:
    chosen, _, verdicts = select_model(OLLAMA_MODELS, "qwen2.5:32b", DEFAULT)
    assert chosen is BIG
    assert verdicts_by_name(verdicts)["qwen2.5:32b"] == "tools, 32.8B: picked (named)"


def test_a_named_model_that_cannot_call_tools_is_refused_with_the_ones_that_can() -> None:
    with pytest.raises(ModelToolsUnsupportedError) as caught:
        select_model(OLLAMA_MODELS, "gemma:2b", DEFAULT)
    error = caught.value
    assert "gemma:2b" in error.message and "cannot call tools" in error.message
    assert "llama3.1:8b, qwen2.5-coder:7b" in error.hint
    assert "qwen2.5:32b" not in error.hint  # over the budget: not suggested


def test_a_named_embedding_model_is_refused() -> None:
    with pytest.raises(ModelToolsUnsupportedError) as caught:
        select_model(OLLAMA_MODELS, "nomic-embed-text", DEFAULT)
    assert "nomic-embed-text:latest" in caught.value.message
    assert "embedding model" in caught.value.message


# --- select_model: picking one --------------------------------------------------------------


def test_a_missing_configured_model_falls_back_to_the_largest_tool_model_within_budget() -> None:
    chosen, reason, verdicts = select_model(OLLAMA_MODELS, "qwen2.5-coder:14b", DEFAULT)
    assert chosen is LLAMA
    assert reason == (
        "configured model qwen2.5-coder:14b is not on ollama; picked llama3.1:8b: calls tools, "
        "8.0B, the largest within the 16B budget"
    )
    assert verdicts_by_name(verdicts) == {
        "nomic-embed-text:latest": "embedding model: never picked",
        "gemma:2b": "no tool support: not picked",
        "qwen2.5-coder:7b": "tools, 7.6B: usable, not picked",
        "qwen2.5:32b": "32.8B: over the 16B budget",
        "llama3.1:8b": "tools, 8.0B: picked",
    }


@pytest.mark.parametrize("wanted", [None, "auto"])
def test_no_name_or_auto_picks_without_mentioning_a_configured_model(wanted: str | None) -> None:
    chosen, reason, _ = select_model(OLLAMA_MODELS, wanted, DEFAULT)
    assert chosen is LLAMA
    assert reason == "picked llama3.1:8b: calls tools, 8.0B, the largest within the 16B budget"


def test_known_tool_callers_rank_before_larger_models_of_unknown_support() -> None:
    unknown = ollama("mystery:14b", 14.0, tools=None)
    small = ollama("qwen2.5-coder:1.5b", 1.5)
    chosen, reason, verdicts = select_model([unknown, small], None, DEFAULT)
    assert chosen is small
    assert (
        reason == "picked qwen2.5-coder:1.5b: calls tools, 1.5B, the only one known to call tools"
    )
    assert verdicts_by_name(verdicts)["mystery:14b"] == "tools unknown, 14.0B: usable, not picked"


def test_with_no_known_tool_caller_the_largest_of_unknown_support_is_picked_and_said() -> None:
    served = [
        ModelInfo("a-1b", "lmstudio", parameters_b=1.0),
        ModelInfo("b-7b", "lmstudio", parameters_b=7.0),
    ]
    chosen, reason, _ = select_model(served, None, DEFAULT)
    assert chosen.name == "b-7b"
    assert "no model there is known to call tools" in reason


def test_unknown_sizes_rank_after_known_sizes_and_ties_go_by_name() -> None:
    nosize = ollama("aaa", None)
    b, a = ollama("zeta:7b", 7.0), ollama("alpha:7b", 7.0)
    assert select_model([nosize, b, a], None, DEFAULT)[0] is a
    only_unknown = [ollama("y", None), ollama("x", None)]
    chosen, _, verdicts = select_model(only_unknown, None, DEFAULT)
    assert chosen.name == "x"
    assert verdicts_by_name(verdicts)["x"] == "tools, size unknown: picked"


def test_sizes_below_a_billion_read_in_millions() -> None:
    tiny = ollama("smollm2:135m", 0.135)
    half = ollama("qwen2.5-coder:0.5b", 0.494)
    chosen, reason, verdicts = select_model([tiny, half], None, DEFAULT)
    assert chosen is half
    assert "494M" in reason
    assert verdicts_by_name(verdicts)["smollm2:135m"] == "tools, 135M: usable, not picked"


def test_no_budget_picks_the_largest() -> None:
    chosen, reason, _ = select_model(OLLAMA_MODELS, None, SelectionSettings(max_params_b=None))
    assert chosen is BIG
    assert reason.endswith("32.8B, the largest")


def test_a_smaller_budget_is_honoured() -> None:
    chosen, _, verdicts = select_model(OLLAMA_MODELS, None, SelectionSettings(max_params_b=7.9))
    assert chosen is CODER
    assert verdicts_by_name(verdicts)["llama3.1:8b"] == "8.0B: over the 7.9B budget"


# --- select_model: nothing usable -----------------------------------------------------------


def test_an_empty_backend_says_to_pull_a_model() -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        select_model([], None, DEFAULT)
    assert "has no models" in caught.value.message
    assert "ollama pull qwen2.5-coder:7b" in caught.value.hint


def test_only_tool_incapable_models_are_named_and_a_capable_one_suggested() -> None:
    with pytest.raises(ModelToolsUnsupportedError) as caught:
        select_model([EMBED, GEMMA], None, DEFAULT)
    assert caught.value.message == "no model on ollama can call tools: gemma:2b"
    assert "ollama pull qwen2.5-coder:7b" in caught.value.hint


def test_only_embedding_models_is_not_found_with_a_pull_hint() -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        select_model([EMBED], "qwen2.5-coder:7b", DEFAULT)
    message = caught.value.message
    assert "qwen2.5-coder:7b is not on ollama" in message and "only embedding" in message
    assert "ollama pull qwen2.5-coder:7b" in caught.value.hint


def test_only_models_over_the_budget_says_how_to_use_one() -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        select_model([GEMMA, BIG], None, DEFAULT)
    assert "qwen2.5:32b (32.8B)" in caught.value.message and "16B" in caught.value.message
    assert "--model" in caught.value.hint and "max_params_b" in caught.value.hint


# --- resolve_llm ------------------------------------------------------------------------------


class Catalog:
    def __init__(
        self, backend: str, models: Sequence[ModelInfo] = (), error: Exception | None = None
    ):
        self._backend = backend
        self._models = [msgspec.structs.replace(m, backend=backend) for m in models]
        self._error = error
        self.listed = 0

    @property
    def backend(self) -> str:
        return self._backend

    async def list_models(self) -> list[ModelInfo]:
        self.listed += 1
        if self._error is not None:
            raise self._error
        return list(self._models)


def catalogs(*items: Catalog) -> Callable[[str], ModelCatalog]:
    by_name = {c.backend: c for c in items}

    def get(name: str) -> ModelCatalog:
        if name not in by_name:
            raise ConfigError(f"no catalog for {name}", hint="a test bug")
        return by_name[name]

    return get


UNREACHABLE = ModelConnectionError(
    "cannot reach the model server at http://127.0.0.1:11434: connection refused",
    hint="start it",
)
EMBEDDED = [
    ModelInfo("qwen2.5-coder-0.5b-instruct-q4_k_m", "embedded", tools=None, parameters_b=0.5)
]


def settings(**given: Any) -> LLMSettings:
    return LLMSettings.model_validate(given)


def resolve(llm: LLMSettings, *cats: Catalog, **kwargs: Any) -> Resolution:
    return asyncio.run(resolve_llm(llm, model_key="default", catalogs=catalogs(*cats), **kwargs))


def test_a_named_backend_uses_the_configured_model() -> None:
    found = resolve(settings(backend="ollama"), Catalog("ollama", OLLAMA_MODELS))
    assert (found.backend, found.model) == ("ollama", "qwen2.5-coder:7b")
    assert found.info is not None and found.info.parameters_b == 7.6
    assert len(found.considered) == 5 and found.skipped == ()


def test_the_backend_argument_overrides_the_configured_backend() -> None:
    llm = settings(backend="embedded")
    found = resolve(
        llm, Catalog("ollama", OLLAMA_MODELS), Catalog("embedded", EMBEDDED), backend="ollama"
    )
    assert found.backend == "ollama"


def test_a_backends_own_table_wins_over_the_shared_one() -> None:
    llm = settings(
        backend="ollama",
        models={"default": "qwen2.5-coder:7b"},
        backends={"ollama": {"kind": "ollama", "models": {"default": "llama3.1:8b"}}},
    )
    assert resolve(llm, Catalog("ollama", OLLAMA_MODELS)).model == "llama3.1:8b"


def test_the_model_argument_may_be_a_key_of_the_tables() -> None:
    llm = settings(backend="ollama", models={"default": "qwen2.5-coder:7b", "big": "qwen2.5:32b"})
    assert resolve(llm, Catalog("ollama", OLLAMA_MODELS), model="big").model == "qwen2.5:32b"


def test_the_model_argument_may_be_a_name_the_backend_has_as_latest() -> None:
    models = [CODER, ollama("llama3.1:latest", 8.0)]
    found = resolve(settings(backend="ollama"), Catalog("ollama", models), model="llama3.1")
    assert found.model == "llama3.1:latest"


def test_the_model_argument_auto_lets_fabric_pick() -> None:
    found = resolve(settings(backend="ollama"), Catalog("ollama", OLLAMA_MODELS), model="auto")
    assert found.model == "llama3.1:8b"


def test_a_model_argument_that_cannot_call_tools_is_refused() -> None:
    with pytest.raises(ModelToolsUnsupportedError, match="gemma:2b"):
        resolve(settings(backend="ollama"), Catalog("ollama", OLLAMA_MODELS), model="gemma:2b")


def test_a_key_no_table_names_lets_fabric_pick() -> None:
    llm = settings(backend="ollama", models={"other": "x"})
    found = resolve(llm, Catalog("ollama", OLLAMA_MODELS))
    assert found.model == "llama3.1:8b" and found.reason.startswith("picked llama3.1:8b")


def test_a_named_backend_that_cannot_be_reached_fails_with_its_own_error() -> None:
    with pytest.raises(ModelConnectionError) as caught:
        resolve(settings(backend="ollama"), Catalog("ollama", error=UNREACHABLE))
    assert caught.value is UNREACHABLE


def test_auto_skips_an_unreachable_backend_and_says_why() -> None:
    found = resolve(settings(), Catalog("ollama", error=UNREACHABLE), Catalog("embedded", EMBEDDED))
    assert (found.backend, found.model) == ("embedded", "qwen2.5-coder-0.5b-instruct-q4_k_m")
    assert found.skipped == (("ollama", UNREACHABLE.message),)
    assert found.reason.startswith("ollama skipped: cannot reach the model server")
    assert (
        "; embedded: configured model qwen2.5-coder:7b is not on embedded; picked" in found.reason
    )


def test_auto_uses_the_first_backend_that_works() -> None:
    embedded = Catalog("embedded", EMBEDDED)
    found = resolve(settings(), Catalog("ollama", OLLAMA_MODELS), embedded)
    assert found.backend == "ollama" and found.skipped == ()
    assert embedded.listed == 0


def test_auto_skips_a_backend_with_nothing_usable() -> None:
    found = resolve(settings(), Catalog("ollama", [EMBED, GEMMA]), Catalog("embedded", EMBEDDED))
    assert found.backend == "embedded"
    assert found.skipped[0][0] == "ollama" and "gemma:2b" in found.skipped[0][1]


def test_auto_skips_a_backend_whose_catalog_cannot_be_built() -> None:
    found = resolve(settings(auto=["embedded", "ollama"]), Catalog("ollama", OLLAMA_MODELS))
    assert found.backend == "ollama"
    assert found.skipped == (("embedded", "no catalog for embedded"),)


def test_auto_with_nothing_reachable_lists_each_backend_and_what_to_do() -> None:
    down = ModelConnectionError("embedded: llama.cpp is not installed", hint="pip install")
    with pytest.raises(ModelConnectionError) as caught:
        resolve(settings(), Catalog("ollama", error=UNREACHABLE), Catalog("embedded", error=down))
    message, hint = caught.value.message, caught.value.hint
    assert "no backend of llm.auto (ollama, embedded) has a usable model" in message
    assert f"- ollama: {UNREACHABLE.message}" in message
    assert "- embedded: embedded: llama.cpp is not installed" in message
    assert "ollama serve" in hint and "pip install 'agent-fabric[local]'" in hint
    assert "--backend" in hint


def test_auto_with_a_reachable_but_unusable_backend_fails_with_that_kind_of_error() -> None:
    with pytest.raises(ModelToolsUnsupportedError) as caught:
        resolve(settings(), Catalog("ollama", [GEMMA]), Catalog("embedded", error=UNREACHABLE))
    assert (
        "- ollama: configured model qwen2.5-coder:7b is not on ollama, and no model on ollama "
        "can call tools: gemma:2b" in caught.value.message
    )
    assert "embedded: cannot reach" in caught.value.message
    assert caught.value.hint.startswith("pull a tool-capable model (for Ollama: `ollama pull")


def test_an_empty_named_backend_names_it() -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        resolve(settings(backend="ollama"), Catalog("ollama", []))
    assert caught.value.message == (
        "configured model qwen2.5-coder:7b is not on ollama, and ollama has no models"
    )
    assert "ollama pull qwen2.5-coder:7b" in caught.value.hint


# --- the tool probe during resolution ----------------------------------------------------------


class Probe:
    def __init__(self, answers: dict[str, bool]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str]] = []

    async def __call__(self, backend: str, model: str) -> bool:
        self.asked.append((backend, model))
        return self.answers[model]


SERVED = [
    ModelInfo("big-unknown", "openai", parameters_b=14.0),
    ModelInfo("mid-unknown", "openai", parameters_b=7.0),
    ModelInfo("no-size", "openai"),
]
PROBING = {"backend": "openai", "models": {"default": "auto"}, "selection": {"probe_tools": True}}


def test_a_model_that_fails_the_probe_is_passed_over_for_the_next() -> None:
    probe = Probe({"big-unknown": False, "mid-unknown": True})
    found = resolve(settings(**PROBING), Catalog("openai", SERVED), probe=probe)
    assert found.model == "mid-unknown"
    assert found.info is not None and found.info.tools is True
    assert probe.asked == [("openai", "big-unknown"), ("openai", "mid-unknown")]
    verdicts = verdicts_by_name(found.considered)
    assert verdicts["big-unknown"] == "tool probe: no tool call: not picked"
    assert verdicts["mid-unknown"] == "tools, 7.0B: picked (tool probe: calls tools)"
    assert "the tool probe confirmed mid-unknown calls tools" in found.reason
    assert "the tool probe found big-unknown did not call tools" in found.reason


def test_when_every_model_fails_the_probe_the_error_names_them() -> None:
    probe = Probe({m.name: False for m in SERVED})
    with pytest.raises(ModelToolsUnsupportedError) as caught:
        resolve(settings(**PROBING), Catalog("openai", SERVED), probe=probe)
    assert "big-unknown, mid-unknown, no-size" in caught.value.message
    assert len(probe.asked) == 3


def test_a_named_model_that_fails_the_probe_is_refused_not_replaced() -> None:
    probe = Probe({"mid-unknown": False})
    llm = settings(**PROBING)
    with pytest.raises(ModelToolsUnsupportedError) as caught:
        resolve(llm, Catalog("openai", SERVED), probe=probe, model="mid-unknown")
    assert "mid-unknown" in caught.value.message and "probe" in caught.value.message
    assert probe.asked == [("openai", "mid-unknown")]


def test_no_probe_when_it_is_off_or_tool_support_is_known() -> None:
    probe = Probe({})
    found = resolve(settings(backend="openai"), Catalog("openai", SERVED), probe=probe)
    assert found.model == "big-unknown" and probe.asked == []
    found = resolve(
        settings(**{**PROBING, "backend": "ollama"}), Catalog("ollama", OLLAMA_MODELS), probe=probe
    )
    assert found.model == "llama3.1:8b" and probe.asked == []


def test_a_probe_that_cannot_reach_the_server_fails_a_named_backend() -> None:
    async def broken(backend: str, model: str) -> bool:
        raise UNREACHABLE

    with pytest.raises(ModelConnectionError):
        resolve(settings(**PROBING), Catalog("openai", SERVED), probe=broken)


# --- probe_tools ------------------------------------------------------------------------------


def test_probe_is_true_when_the_model_calls_the_offered_tool() -> None:
    client = ScriptedChatClient([tool_call("get_time")])
    assert asyncio.run(probe_tools(client)) is True
    messages, tools = client.requests[0]
    assert [m["role"] for m in messages] == ["user"] and "get_time" in messages[0]["content"]
    assert [t["function"]["name"] for t in tools] == ["get_time"]
    assert tools[0]["function"]["parameters"]["type"] == "object"


@pytest.mark.parametrize(
    "answer",
    [
        reply("It is about noon."),
        tool_call("get_weather", city="Paris"),
        msgspec.structs.replace(tool_call("get_time"), tool_calls_from_text=True),
        ModelToolsUnsupportedError("registry.ollama.ai/library/gemma:2b does not support tools"),
    ],
    ids=["text", "other-tool", "from-text", "server-refuses-tools"],
)
def test_probe_is_false_without_a_native_call_of_the_tool(answer: Any) -> None:
    assert asyncio.run(probe_tools(ScriptedChatClient([answer]))) is False


def test_probe_lets_other_errors_through() -> None:
    client = ScriptedChatClient([ModelAuthError("refused", status_code=401)])
    with pytest.raises(ModelError):
        asyncio.run(probe_tools(client))


# --- ProbeCache -------------------------------------------------------------------------------


def test_probe_answers_survive_a_new_cache_object(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "tool_probes.json"
    cache = ProbeCache(path)
    assert cache.get("ollama", "http://127.0.0.1:11434", "gemma:2b") is None
    assert cache.set("ollama", "http://127.0.0.1:11434", "gemma:2b", False) is True
    assert cache.set("ollama", "http://127.0.0.1:11434", "llama3.1:8b", True) is True
    again = ProbeCache(path)
    assert again.get("ollama", "http://127.0.0.1:11434", "gemma:2b") is False
    assert again.get("ollama", "http://127.0.0.1:11434", "llama3.1:8b") is True
    assert again.get("ollama", "http://10.0.0.5:11434", "llama3.1:8b") is None
    assert again.get("vllm", "http://127.0.0.1:11434", "llama3.1:8b") is None
    assert sorted(p.name for p in path.parent.iterdir()) == ["tool_probes.json"]
    data = json.loads(path.read_text("utf-8"))
    assert data["version"] == 1
    assert data["probes"]["ollama"]["http://127.0.0.1:11434"]["gemma:2b"]["tools"] is False


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        "[1, 2]",
        '{"probes": {"ollama": 3}}',
        '{"probes": {"ollama": {"u": {"m": {"tools": "yes"}}}}}',
    ],
)
def test_a_corrupt_cache_counts_as_empty_and_is_replaced(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tool_probes.json"
    path.write_text(content, "utf-8")
    cache = ProbeCache(path)
    assert cache.get("ollama", "u", "m") is None
    assert cache.set("ollama", "u", "m", True) is True
    assert ProbeCache(path).get("ollama", "u", "m") is True


def test_a_cache_that_cannot_be_written_does_not_stop_anything(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", "utf-8")
    cache = ProbeCache(blocker / "sub" / "tool_probes.json")  # its folder cannot be made
    assert cache.set("ollama", "u", "m", True) is False
    assert cache.get("ollama", "u", "m") is None


def test_the_default_cache_lives_under_xdg_cache_home_or_home(tmp_path: Path) -> None:
    assert (
        default_path({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "fabric" / "tool_probes.json"
    )
    assert default_path({}) == Path.home() / ".cache" / "fabric" / "tool_probes.json"
    assert (
        default_path({"XDG_CACHE_HOME": "relative"})
        == Path.home() / ".cache" / "fabric" / "tool_probes.json"
    )
