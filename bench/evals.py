"""The shipped eval suites against a real model: the figures docs/evals.md publishes.

    python bench/evals.py                         # engineering, easy tier, the default model
    python bench/evals.py --tier medium --tier hard --repeats 3
    python bench/evals.py --suite research        # the offline research suite
    python bench/evals.py --backend ollama --model qwen2.5-coder:7b

It runs ``fabric eval`` (the real command, with the project's fabric.yaml) into
``evals-out/<suite>-<tiers>-<model or default>/`` and prints the summary's overall and per-tier
tables. Rerun the same command to continue an eval that was stopped. A bench, not a test: a
real model takes minutes per attempt (about 3 to 6 on two cores with the embedded 1.5B model).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="engineering", help="a folder under evals/")
    parser.add_argument(
        "--tier", action="append", help="easy, medium or hard (repeatable; default: easy)"
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--backend")
    parser.add_argument("--model")
    args = parser.parse_args()
    tiers = args.tier or (["easy"] if args.suite == "engineering" else [])
    name = "-".join([args.suite, *tiers, (args.model or "default").replace(":", "_")])
    out = ROOT / "evals-out" / name
    command = [sys.executable, "-P", "-m", "fabric", "eval", str(ROOT / "evals" / args.suite)]
    command += ["--config", str(ROOT / "fabric.yaml"), "--out", str(out)]
    command += ["--repeats", str(args.repeats)]
    command += [f"--case=tier:{tier}" for tier in tiers]
    if args.backend:
        command += ["--backend", args.backend]
    if args.model:
        command += ["--model", args.model]
    print("$", " ".join(command[2:]).replace(sys.executable, "python"), flush=True)
    code = subprocess.call(command, cwd=ROOT)
    summary = out / "summary.md"
    if summary.is_file():
        print(summary.read_text("utf-8").split("## By case")[0])
    return code


if __name__ == "__main__":
    raise SystemExit(main())
