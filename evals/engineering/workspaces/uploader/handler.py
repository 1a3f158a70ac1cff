"""The upload endpoint's decision, separated from the web framework for testing."""

from __future__ import annotations

from limits import accept_upload, max_file_bytes


def handle_upload(size: int, content_type: str) -> tuple[int, str]:
    if accept_upload(size, content_type):
        return 201, "stored"
    if size > max_file_bytes():
        return 413, f"file too large (limit {max_file_bytes()} bytes)"
    return 415, f"unsupported type {content_type}"
