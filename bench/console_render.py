"""Time to first render of a run's timeline: the share file (``fabric show RUN --html``) of a
run of 1,000 and of 10,000 events, opened from disk in headless Chromium (Debian's
``/usr/bin/chromium``, driven by Playwright).

    python bench/console_render.py                    # 1,000 and 10,000 events, 5 loads each
    python bench/console_render.py --events 500,20000 --repeats 3 --json

For each size: the runlog (run_started, steps of llm_request, llm_response, tool_call,
policy_decision and tool_result, run_finished; the test suite's ``long_run``), its share
file written by the real command, then ``--repeats`` fresh pages, each timed by the marks
``timeline.js`` sets (milliseconds since the navigation began, medians):

- ``script``: ``fabric-timeline-start``, when the page's script starts (the HTML, with the
  events embedded, is parsed);
- ``built``: ``fabric-timeline-built``, the events parsed and folded and the first page of the
  timeline built;
- ``painted``: ``fabric-timeline-painted``, after the next frame: the first page is on screen.

Also the file's size and the DOM elements on the page. Figures only, no targets; nothing
leaves the machine (the pages are opened with the network off).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from console.runlogs import long_run, write_runlog  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from fabric.interfaces.cli.app import app  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
MARKS = {"script": "fabric-timeline-start", "built": "fabric-timeline-built",
         "painted": "fabric-timeline-painted"}  # fmt: skip
_READ = """names => Object.fromEntries(Object.entries(names).map(([key, name]) =>
  [key, performance.getEntriesByName(name)[0]?.startTime ?? null]))"""


def share_file(events: int, folder: Path) -> Path:
    runlog = write_runlog(folder / f"run{events}", long_run(events))
    out = folder / f"run{events}.html"
    result = CliRunner().invoke(app, ["show", str(runlog), "--html", "--out", str(out)])
    if result.exit_code != 0:
        raise SystemExit(result.output)
    return out


def measure(path: Path, repeats: int, browser: Any) -> dict[str, Any]:
    loads: list[dict[str, float]] = []
    nodes = 0
    for _ in range(repeats):
        context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(path.as_uri())
        page.wait_for_function(
            "() => performance.getEntriesByName('fabric-timeline-painted').length > 0"
        )
        loads.append(page.evaluate(_READ, MARKS))
        nodes = page.evaluate("() => document.getElementsByTagName('*').length")
        context.close()
    medians = {key: statistics.median(load[key] for load in loads) for key in MARKS}
    return {"bytes": path.stat().st_size, "elements": nodes, **medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", default="1000,10000", help="run sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="page loads per size")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args()
    sizes = [int(n) for n in args.events.split(",")]
    figures: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for size in sizes:
                figures[size] = measure(share_file(size, Path(tmp)), args.repeats, browser)
        finally:
            browser.close()
    if args.json:
        print(json.dumps({str(k): v for k, v in figures.items()}, indent=2))
        return
    print(f"share file in {CHROMIUM}, median of {args.repeats} loads (ms since navigation)")
    print(f"{'events':>8} {'file':>9} {'script':>8} {'built':>8} {'painted':>8} {'elements':>9}")
    for size, f in figures.items():
        print(
            f"{size:>8,} {f['bytes'] / 1e6:>7.2f}MB {f['script']:>8.0f} {f['built']:>8.0f}"
            f" {f['painted']:>8.0f} {f['elements']:>9,}"
        )


if __name__ == "__main__":
    main()
