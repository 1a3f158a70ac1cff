"""How far the model gets with the agent loop taken away: a ceiling for the engineering pack.

For each easy fix case of evals/engineering the model is shown, in one plain-text request,
what a brief at its best would show: the failing tests' output and every source file of the
project, with the bug's place left for it to find. It is asked for the corrected file(s). The
answer is written over a fresh copy of the workspace (source files only, never tests) and
judged by the case's own checks, run confined as `fabric eval` runs them. No tools, no steps,
no repair rounds: a model that cannot fix the bug when it is put in front of it will not fix
it in a loop either, so this bounds what any scaffolding of the loop can reach.

    python bench/model_ceiling.py                 # 3 samples per case, the default model
    python bench/model_ceiling.py --samples 5 --case fix-page-count
    python bench/model_ceiling.py --backend ollama --model qwen2.5-coder:7b

It prints each sample's verdict and a table of passes per case. A bench, not a test: each
sample is one model reply (about half a minute to two on two cores with the embedded model).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fabric.application.evals.checks import run_checks  # noqa: E402
from fabric.config.eval_suite_loader import load_suite  # noqa: E402
from fabric.config.loader import load_config  # noqa: E402
from fabric.domain.models import ChatRequest  # noqa: E402
from fabric.domain.test_output import trim_test_output  # noqa: E402
from fabric.infrastructure.tools.verifiers import AUTO_COMMAND  # noqa: E402
from fabric.interfaces.compose import build_runner  # noqa: E402
from fabric.interfaces.eval_setup import AttemptFolders, ConfinedChecks  # noqa: E402

SYSTEM = "You are a careful software engineer. You fix bugs in Python projects."
ASK = """\
The project's tests fail:

{failure}

The project's source files:
{sources}

The tests are right and the source code is wrong. Find the mistake and fix it. For each file
you change, write its path on a line of its own, then the whole corrected file in a ```python
code block. Change only what the fix needs."""
_BLOCK = re.compile(r"(?:^|\n)[`*# ]*([\w./-]+\.py)[`*: ]*\n+```(?:python|py)?\n(.*?)```", re.S)
_BARE = re.compile(r"```(?:python|py)?\n(.*?)```", re.S)


def sources_of(folder: Path) -> dict[str, str]:
    """The project's own Python files, tests left out."""
    found = {}
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).as_posix()
        name = path.name
        if rel.startswith("tests/") or name.startswith("test_") or name == "conftest.py":
            continue
        found[rel] = path.read_text("utf-8")
    return found


def answer_files(answer: str, sources: dict[str, str]) -> dict[str, str]:
    """The corrected files in a reply: blocks headed by a path, else each bare block given to
    the source file it is most like. Only existing source files are ever written."""
    named = {p: code for p, code in _BLOCK.findall(answer) if p in sources}
    if named:
        return named
    files: dict[str, str] = {}
    for code in _BARE.findall(answer):
        best = max(sources, key=lambda p: difflib.SequenceMatcher(None, sources[p], code).ratio())
        files[best] = code
    return files


async def sample(case, client, checks: ConfinedChecks, work: Path) -> tuple[bool, str]:  # type: ignore[no-untyped-def]
    folder = work / f"{case.id}-{time.monotonic_ns()}"
    shutil.copytree(case.workspace, folder)
    outcome = await checks.run(folder, case.pack, AUTO_COMMAND, 60)
    sources = sources_of(folder)
    shown = "".join(f"\n{path}:\n```python\n{text}```\n" for path, text in sources.items())
    prompt = ASK.format(failure=trim_test_output(outcome.output, 1500).strip(), sources=shown)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    reply = await client.chat(ChatRequest(messages, []))
    files = answer_files(reply.message.get("content") or "", sources)
    if not files:
        return False, "no corrected file in the reply"
    for path, code in files.items():
        (folder / path).write_text(code if code.endswith("\n") else code + "\n", "utf-8")
    results = await run_checks(
        case.checks,
        folder=folder,
        pack=case.pack,
        payload=None,
        workspaces=AttemptFolders(),
        commands=checks,
    )
    failed = [r for r in results if not r.passed]
    changed = ", ".join(files)
    if failed:
        return False, f"wrote {changed}; {failed[0].label}: {failed[0].evidence[:120]!r}"
    return True, f"wrote {changed}; all {len(results)} checks pass"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument(
        "--case", action="append", help="a case id (repeatable; default: easy fixes)"
    )
    parser.add_argument("--backend")
    parser.add_argument("--model")
    args = parser.parse_args()
    suite = load_suite(ROOT / "evals" / "engineering")
    cases = [
        c
        for c in suite.cases
        if (c.id in args.case if args.case else c.tier == "easy" and "fix" in c.tags)
    ]
    loaded = load_config(ROOT / "fabric.yaml")
    with tempfile.TemporaryDirectory(prefix="fabric-ceiling-") as tmp:
        work = Path(tmp)
        runner = build_runner(loaded, runs_dir=work / "runs")
        try:
            resolution = await runner.resolve("engineering", backend=args.backend, model=args.model)
            client = await runner.backends.client(
                resolution.backend, resolution.model, resolution.info
            )
            print(f"model: {resolution.model} on {resolution.backend}; {args.samples} sample(s)")
            checks = ConfinedChecks(runner)
            table = []
            try:
                for case in cases:
                    passed = 0
                    for n in range(1, args.samples + 1):
                        started = time.perf_counter()
                        ok, why = await sample(case, client, checks, work)
                        passed += ok
                        took = time.perf_counter() - started
                        print(f"{case.id} #{n}: {'PASS' if ok else 'fail'} ({took:.0f} s) {why}")
                    table.append((case.id, passed))
            finally:
                await client.aclose()
        finally:
            await runner.aclose()
    total = sum(p for _, p in table)
    print("\n| case | passed |\n| --- | --- |")
    for case_id, passed in table:
        print(f"| {case_id} | {passed}/{args.samples} |")
    print(f"| all | {total}/{args.samples * len(table)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
