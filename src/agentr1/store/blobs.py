"""Image bytes stored once by content hash, in a directory beside the database; steps keep references.

An agent that sends a screenshot every turn re-sends every earlier one too: stored inline, a session's
steps would hold each image once per later step. So before a step is written, every inline image in
its messages (an OpenAI ``image_url`` / Responses ``input_image`` data URL, an Anthropic base64
``source``) is written to the :class:`ImageStore` under its sha256 and replaced, in place and in the
part's own shape, by the reference ``agentr1-image:<sha256>``. :func:`inline_images` puts the bytes back
(as a data URL, or as Anthropic base64), which is what ``GET /sessions/{id}`` and the JSONL export
return; the parquet export carries the referenced images in an ``images`` column.

The directory defaults to ``<database file>.images/`` for SQLite and ``$AGENTR1_IMAGE_DIR`` (else
``~/.cache/agentr1/images``) otherwise; several gateways writing to one PostgreSQL database need one
shared directory (``AGENTR1_IMAGE_DIR`` or ``TraceStore.open(..., image_dir=...)``). No schema change:
references live in the steps' JSON messages.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["IMAGE_REF_PREFIX", "ImageStore", "externalize_images", "image_refs", "inline_images", "sniff_media_type"]

IMAGE_REF_PREFIX = "agentr1-image:"
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[^,;]*)*?;base64,(?P<data>.*)$", re.DOTALL)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
          (b"GIF89a", "image/gif"))


def sniff_media_type(data: bytes) -> str:
    """The image format from its first bytes (PNG, JPEG, GIF, WEBP), else application/octet-stream."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"


class ImageStore:
    """``<root>/<sha[:2]>/<sha>``: written once (temporary file + atomic rename), read by hash."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()

    @classmethod
    def for_database(cls, url: str, image_dir: str | os.PathLike[str] | None = None) -> ImageStore:
        """The store for a database URL: ``image_dir`` if given, else beside a SQLite file, else
        ``$AGENTR1_IMAGE_DIR`` or ``~/.cache/agentr1/images``."""
        if image_dir is not None:
            return cls(image_dir)
        if os.environ.get("AGENTR1_IMAGE_DIR"):
            return cls(os.environ["AGENTR1_IMAGE_DIR"])
        if url.startswith("sqlite:///") and ":memory:" not in url and len(url) > len("sqlite:///"):
            return cls(f"{url[len('sqlite:///'):]}.images")
        if url.startswith("sqlite"):  # in memory: images live as long as the process
            return cls(tempfile.mkdtemp(prefix="agentr1-images-"))
        return cls(Path.home() / ".cache" / "agentr1" / "images")

    def path(self, sha256: str) -> Path:
        if not _SHA256.match(sha256):
            raise KeyError(f"not a sha256 hex digest: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def put(self, data: bytes) -> str:
        """Store ``data`` (once); returns its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        target = self.path(sha)
        if target.is_file():
            return sha
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return sha

    def get(self, sha256: str) -> bytes:
        """The bytes stored under ``sha256`` (KeyError when absent)."""
        try:
            return self.path(sha256).read_bytes()
        except FileNotFoundError as exc:
            raise KeyError(f"image {sha256} is not in {self.root}") from exc

    def has(self, sha256: str) -> bool:
        try:
            return self.path(sha256).is_file()
        except KeyError:
            return False


def _slots(part: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """Where an image part keeps its data: (the dict, the key), or None when it is not an image part."""
    kind = part.get("type")
    if kind == "image" and isinstance(part.get("source"), dict) and part["source"].get("type") == "base64":
        return part["source"], "data"
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        return part, "image_url"
    if kind == "image_url":
        url = part.get("image_url")
        if isinstance(url, dict) and isinstance(url.get("url"), str):
            return url, "url"
        if isinstance(url, str):
            return part, "image_url"
    return None


def _walk_parts(messages: Any) -> Any:
    """Every content part dict of a list of messages (or of one message)."""
    for message in messages if isinstance(messages, list) else [messages]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            yield from (p for p in content if isinstance(p, dict))


def _has_inline(messages: Any) -> bool:
    # the gateway asks this of every step's whole history: text-only messages cost one type check each
    for message in messages if isinstance(messages, list) else [messages]:
        if isinstance(message, dict) and isinstance(message.get("content"), list) and _has_inline_part(message):
            return True
    return False


def _has_inline_part(message: dict[str, Any]) -> bool:
    for part in _walk_parts(message):
        slot = _slots(part)
        if slot is not None and not str(slot[0][slot[1]]).startswith(IMAGE_REF_PREFIX):
            value = str(slot[0][slot[1]])
            if value.startswith("data:") or part.get("type") == "image":
                return True
    return False


def externalize_images(messages: Any, images: ImageStore) -> Any:
    """A copy of ``messages`` with every inline image stored in ``images`` and replaced by its
    reference (``messages`` itself when it has none). Data that is not valid base64 stays inline
    (the gateway refuses such requests before they are stored)."""
    if not _has_inline(messages):
        return messages
    out = copy.deepcopy(messages)
    for part in _walk_parts(out):
        slot = _slots(part)
        if slot is None:
            continue
        holder, key = slot
        value = str(holder[key])
        if part.get("type") == "image":
            payload = value
        else:
            match = _DATA_URL.match(value)
            if match is None:
                continue
            payload = match["data"]
        try:
            data = base64.b64decode(payload.strip(), validate=True)
        except (binascii.Error, ValueError):
            continue
        holder[key] = f"{IMAGE_REF_PREFIX}{images.put(data)}"
    return out


def inline_images(messages: Any, images: ImageStore, *, missing: str = "keep") -> Any:
    """A copy of ``messages`` with references replaced by the stored bytes, each part in its own shape
    (a data URL, or Anthropic base64). ``missing="keep"`` leaves a reference whose bytes are absent,
    ``"raise"`` raises KeyError."""
    if not image_refs(messages):
        return messages
    out = copy.deepcopy(messages)
    for part in _walk_parts(out):
        slot = _slots(part)
        if slot is None or not str(slot[0][slot[1]]).startswith(IMAGE_REF_PREFIX):
            continue
        holder, key = slot
        sha = str(holder[key])[len(IMAGE_REF_PREFIX):]
        try:
            data = images.get(sha)
        except KeyError:
            if missing == "raise":
                raise
            continue
        encoded = base64.b64encode(data).decode("ascii")
        holder[key] = encoded if part.get("type") == "image" else f"data:{sniff_media_type(data)};base64,{encoded}"
    return out


def image_refs(messages: Any) -> list[str]:
    """The sha256 of every stored reference in ``messages``, in order (repeats kept)."""
    refs = []
    for part in _walk_parts(messages):
        slot = _slots(part)
        if slot is not None:
            value = str(slot[0][slot[1]])
            if value.startswith(IMAGE_REF_PREFIX):
                refs.append(value[len(IMAGE_REF_PREFIX):])
    return refs
