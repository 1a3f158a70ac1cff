"""A runlog as a download: its complete lines as they are now, without the service's secrets
(``GET /tasks/{id}/runlog``, ``GET /runs/{id}/runlog``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

from fastapi.responses import StreamingResponse

from fabric.domain.secrets import Secrets
from fabric.infrastructure.runlog.tail import runlog_snapshot


async def runlog_download(path: Path, secrets: Secrets, filename: str) -> StreamingResponse:
    """The runlog at ``path`` as JSON lines, with its length; a snapshot, since the log of a
    running run grows while it is sent. FileNotFoundError when there is none."""
    size, chunks = runlog_snapshot(path)
    if secrets:  # its writer redacted it; one written before is redacted as it is sent
        size, chunks = await asyncio.to_thread(_redacted, path, size, secrets)
    headers = {
        "Content-Length": str(size),
        "Content-Disposition": f'attachment; filename="{filename}"',
    }
    return StreamingResponse(chunks, media_type="application/x-ndjson", headers=headers)


def _redacted(path: Path, size: int, secrets: Secrets) -> tuple[int, Iterator[bytes]]:
    """The runlog's first ``size`` bytes redacted line by line, and their length: counted in a
    first pass over the same open file as the second, so it stays true even if a resume
    replaces the file meanwhile."""
    file = path.open("rb")

    def read() -> Iterator[bytes]:
        file.seek(0)
        left = size
        while left > 0 and (data := file.read(min(left, 1 << 20))):
            left -= len(data)
            yield data

    def send() -> Iterator[bytes]:
        with file:
            yield from secrets.redact_lines(read())

    try:
        return sum(map(len, secrets.redact_lines(read()))), send()
    except BaseException:
        file.close()
        raise
