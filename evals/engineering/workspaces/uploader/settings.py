"""Service-wide settings."""

MAX_UPLOAD_MB = 25
"""The advertised upload limit, in mebibytes."""
ALLOWED_TYPES = ("image/png", "image/jpeg", "application/pdf")
CHUNK_SIZE = 64 * 1024
