"""An instant, stateless OpenAI-compatible chat server for benchmarks (loopback only).

Run as its own process so it never shares the measured process's GIL:

    python bench/mock_server.py [--port 0] [--tool read_file] [--tool-args JSON]
                                [--finish-args JSON] [--delay-ms N]

It prints ``READY <port>`` on stdout once it listens on 127.0.0.1. ``--delay-ms`` makes every
chat answer wait that long first (a model that takes time to answer; default 0).

How it answers ``POST .../chat/completions``: the model name says how many model calls the
task takes (``steps-20``: 20 calls). The server counts the tool results already in the request
(``"role":"tool"`` in the raw body, no JSON parse); while there are fewer than N-1 it answers
with one call to the cheap tool (ids ``call_1``, ``call_2``, ... unique per step), then with a
``finish_task`` call. So any number of tasks, of any length, can run against one server at once.

``GET /stats`` returns ``{"requests": n, "body_bytes": b}`` (request bodies received since the
last reset); ``GET /stats?reset=1`` returns them and resets. Other GETs answer a model list
naming ``steps-1`` ... ``steps-1000`` (fabric resolves the model against it before a run).

It is a minimal HTTP/1.1 keep-alive server on asyncio streams: one read of the head, one of the
body (Content-Length), one write of a prebuilt reply. Parsing a request and building the answer
costs a few tens of microseconds (see bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys

_TOOL_RESULT = re.compile(rb'"role"\s*:\s*"tool"')
_MODEL = re.compile(rb'"model"\s*:\s*"([^"]*)"')
_STEPS = re.compile(r"steps-(\d+)")

MODEL_LIST = json.dumps(
    {"object": "list", "data": [{"id": f"steps-{n}", "object": "model"} for n in range(1, 1001)]}
).encode()


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.body_bytes = 0


def _completion(model: str, name: str, arguments: str, call_id: str) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _response(status: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Answerer:
    """Chooses each reply from the request body alone."""

    def __init__(self, tool: str, tool_args: str, finish_args: str, delay: float = 0.0) -> None:
        self.tool, self.tool_args, self.finish_args = tool, tool_args, finish_args
        self.delay = delay
        """Seconds every chat answer waits."""

    def answer(self, body: bytes) -> bytes:
        found = _MODEL.search(body)
        model = found.group(1).decode() if found else "steps-1"
        steps_match = _STEPS.search(model)
        steps = int(steps_match.group(1)) if steps_match else 1
        done = len(_TOOL_RESULT.findall(body))
        call_id = f"call_{done + 1}"
        if done < steps - 1:
            payload = _completion(model, self.tool, self.tool_args, call_id)
        else:
            payload = _completion(model, "finish_task", self.finish_args, call_id)
        return _response("200 OK", payload)


async def _serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    answerer: Answerer,
    stats: Stats,
) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.split(b"\r\n")
            method, _, rest = lines[0].partition(b" ")
            path = rest.partition(b" ")[0]
            length = 0
            close = False
            for line in lines[1:]:
                key, _, value = line.partition(b":")
                key = key.strip().lower()
                if key == b"content-length":
                    length = int(value)
                elif key == b"connection" and value.strip().lower() == b"close":
                    close = True
            body = await reader.readexactly(length) if length else b""
            if method == b"POST":
                stats.requests += 1
                stats.body_bytes += len(body)
                if answerer.delay:
                    await asyncio.sleep(answerer.delay)
                writer.write(answerer.answer(body))
            elif path.startswith(b"/stats"):
                data = {"requests": stats.requests, "body_bytes": stats.body_bytes}
                if b"reset=1" in path:
                    stats.requests = stats.body_bytes = 0
                writer.write(_response("200 OK", json.dumps(data).encode()))
            else:
                writer.write(_response("200 OK", MODEL_LIST))
            if writer.transport.get_write_buffer_size() > 65536:
                await writer.drain()
            if close:
                return
    except (asyncio.IncompleteReadError, ConnectionError):
        return
    finally:
        writer.close()


async def serve(port: int, answerer: Answerer) -> None:
    stats = Stats()
    server = await asyncio.start_server(
        lambda r, w: _serve_connection(r, w, answerer, stats),
        "127.0.0.1",
        port,
        backlog=1024,
        limit=1 << 20,
    )
    bound = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"READY {bound}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--tool", default="read_file", help="the cheap tool the model calls")
    parser.add_argument("--tool-args", default='{"path":"small.txt"}')
    parser.add_argument(
        "--finish-args",
        default='{"summary":"done","artifacts":[],"next_steps":[],"notes":""}',
    )
    parser.add_argument("--delay-ms", type=float, default=0.0, help="wait before each answer")
    args = parser.parse_args(argv)
    answerer = Answerer(args.tool, args.tool_args, args.finish_args, args.delay_ms / 1000)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, answerer))


if __name__ == "__main__":
    main()
