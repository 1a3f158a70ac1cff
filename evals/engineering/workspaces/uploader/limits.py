"""Upload size limits, as the HTTP layer enforces them."""

from __future__ import annotations

from settings import ALLOWED_TYPES, MAX_UPLOAD_MB

MULTIPART_OVERHEAD = 2 * 1024
"""Bytes of a request body set aside for the multipart boundary and part headers."""


def max_body_bytes() -> int:
    return MAX_UPLOAD_MB * 1024 * 1024


def max_file_bytes() -> int:
    """The largest file that fits in a request body once the multipart framing is counted."""
    return max_body_bytes() - MULTIPART_OVERHEAD


def accept_upload(size: int, content_type: str) -> bool:
    return 0 < size <= max_file_bytes() and content_type in ALLOWED_TYPES
