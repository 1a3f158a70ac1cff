"""The embedded model server's own process: ``python -m fabric.infrastructure.llm.embedded_server``.

Loads a GGUF with llama.cpp (the ``xllamacpp`` package) and serves llama.cpp's
OpenAI-compatible HTTP API on 127.0.0.1 at a free port, requiring the API key given in
``FABRIC_EMBEDDED_KEY``. Prints one JSON line ``{"url": ...}`` on stdout when it answers, or
``{"error": ...}`` when it cannot start. It never outlives fabric (``--parent``, fabric's
pid): on Linux the kernel kills it when fabric's process ends, however that ends (even while
the model is still loading); elsewhere, and on a normal stop, it ends when its standard input
closes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
from typing import TextIO

KEY_ENV = "FABRIC_EMBEDDED_KEY"
_PR_SET_PDEATHSIG = 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--parent", type=int, default=0, help="fabric's pid: die with it")
    args = parser.parse_args(argv)
    if args.parent and not _dies_with(args.parent):
        return 1  # fabric is gone already: nobody will ask anything
    # The answer goes to fabric on a private copy of stdout; fd 1 itself then points at the
    # log (stderr), so nothing llama.cpp prints can fill a pipe nobody reads and hang it.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
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
    params.api_keys = [os.environ.pop(KEY_ENV, "")]
    if args.threads:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:  # llama.cpp refuses the file, or runs out of memory
        _say(answer, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    _say(answer, {"url": str(server.listening_address)})
    sys.stdin.read()  # until fabric closes the pipe or exits
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
