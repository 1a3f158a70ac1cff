"""The research pack: searches the web, reads pages, and answers with cited sources."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fabric.application.pack import Pack
from fabric.config.schema import PackSettings, SandboxSettings, WebSettings
from fabric.infrastructure.tools.function_tool import json_schema_of
from fabric.infrastructure.tools.library import library_tools
from fabric.infrastructure.tools.verifiers import CitationVerifier

SYSTEM_PROMPT = """\
You are a careful researcher. Find sources with web_search, read them with fetch_url, and
answer only from what you read. Every claim in your answer needs a citation: the page's URL
and a short quote copied exactly from that page. Every number, version and date in your
answer must appear in one of your quotes, written as the page writes it: quote the sentence
that states it. If the sources disagree or do not answer the question, say so. Finish with
finish_task."""


class Citation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="The page the quote comes from.")
    quote: str = Field(description="A short passage copied exactly from the page.")


class ResearchResult(BaseModel):
    """What the research pack reports."""

    model_config = ConfigDict(extra="forbid")

    answer: str = Field(description="The answer to the question, grounded in the citations.")
    citations: list[Citation] = Field(description="Sources backing the answer.")


class ResearchSettings(PackSettings):
    """Settings of the research pack."""

    description: str = Field(
        "Searches the web and answers with cited sources.",
        description="One line shown by `fabric packs`.",
    )
    sandbox: SandboxSettings = Field(
        default_factory=lambda: SandboxSettings(network=True),
        description="What the pack's tools may touch; network must be on for web tools.",
    )
    web: WebSettings = Field(
        default_factory=WebSettings, description="Fetch caps and the search backend."
    )
    system_prompt: str = Field(SYSTEM_PROMPT, description="Replaces the built-in prompt.")


def build(settings: ResearchSettings) -> Pack:
    return Pack(
        name="research",
        description=settings.description,
        system_prompt=settings.system_prompt,
        tools=library_tools("web_search", "fetch_url", bind={"web": settings.web}),
        finish_schema=json_schema_of(ResearchResult),
        finish_model=ResearchResult,
        finish_description="Finish with the answer and its citations (url and exact quote).",
        sandbox=settings.sandbox,
        # the cited pages were read and hold the quotes, and the quotes hold the answer's figures
        verifiers=(CitationVerifier("citations", fetch_tool="fetch_url", answer_field="answer"),),
    )
