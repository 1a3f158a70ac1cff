"""The embedded model's own process: ``python -m fabric.infrastructure.llm.embedded_server``.

Loads a GGUF with llama.cpp (the ``xllamacpp`` package) and serves llama.cpp's
OpenAI-compatible HTTP API on 127.0.0.1 at a free port. It is the model program of the shared
server's supervisor (``embedded_supervisor``) and speaks its protocol:

- standard input, first line: ``{"api_key": ..., "parent": <supervisor pid>}``. The key is
  required by every request; it never appears in arguments or the environment.
- standard output: one JSON line, ``{"url": ...}`` when it answers, or ``{"error": ...}``.
- it serves until its standard input closes. It never outlives the supervisor: on Linux the
  kernel kills it when the supervisor ends, however that ends (even while the model is still
  loading, when nothing here could react).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
from typing import TextIO

_PR_SET_PDEATHSIG = 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        request = json.loads(sys.stdin.readline() or "{}")
    except ValueError:
        request = {}
    key = str(request.get("api_key") or "") if isinstance(request, dict) else ""
    parent = int(request.get("parent") or 0) if isinstance(request, dict) else 0
    if parent and not _dies_with(parent):
        return 1  # the supervisor is gone already: nobody will ask anything
    # The answer goes to the supervisor on a private copy of stdout; fd 1 itself then points
    # at the log (stderr), so nothing llama.cpp prints can fill a pipe nobody reads and hang it.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    if not key:
        _say(answer, {"error": "no API key was given on standard input"})
        return 1
    try:
        import xllamacpp
    except ImportError:
        _say(answer, {"error": "the xllamacpp package is not installed"})
        return 1
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.n_ctx = args.ctx
    params.port = 0
    params.use_jinja = True
    params.n_parallel = 1
    params.api_keys = [key]
    if args.threads:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:  # llama.cpp refuses the file, or runs out of memory
        _say(answer, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    _say(answer, {"url": str(server.listening_address)})
    answer.close()
    sys.stdin.read()  # until the supervisor closes the pipe or ends
    del server
    return 0


def _dies_with(parent: int) -> bool:
    """Have the kernel kill this process when ``parent`` ends (Linux); False when it has
    ended already (this process was then handed to another parent before asking)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getppid() == parent


def _say(out: TextIO, message: dict[str, str]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


if __name__ == "__main__":
    raise SystemExit(main())
