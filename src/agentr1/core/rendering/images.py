"""Image content parts: recognised in every API's shape, loaded under a policy, identified by content hash.

The three shapes agents send (and the one the store keeps):

- OpenAI Chat Completions: ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,...",
  "detail": "auto"}}`` (``image_url`` may also be a bare string);
- OpenAI Responses: ``{"type": "input_image", "image_url": "data:...", "detail": "auto"}``;
- Anthropic Messages: ``{"type": "image", "source": {"type": "base64", "media_type": "image/png",
  "data": "..."}}`` (or ``{"type": "url", "url": ...}``);
- stored: the same part with its bytes replaced by a reference ``agentr1-image:<sha256 hex>``
  (see :func:`agentr1.store.blobs.externalize_images`).

Data URLs and base64 sources are always accepted; ``file://`` URLs only inside directories a setting
names; ``http(s)`` URLs only when a setting enables fetching (the gateway must not fetch arbitrary
addresses for whoever can reach it). Every image is decoded and checked (format, byte size, pixel
count) before it reaches the model: a malformed, oversized or disallowed image is a
:class:`~agentr1.core.rendering.base.RenderError` (the gateway answers 400), never a crash.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1.core.rendering.base import RenderError
from agentr1.store import IMAGE_REF_PREFIX

__all__ = [
    "IMAGE_PART_TYPES",
    "ImageData",
    "ImagePolicy",
    "image_identity",
    "image_part_source",
    "image_ref",
    "is_image_part",
    "iter_image_parts",
    "load_image",
]

IMAGE_PART_TYPES = ("image_url", "input_image", "image")
MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,(?P<data>.*)$", re.DOTALL)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
RefResolver = Callable[[str], bytes]


@dataclass(frozen=True, slots=True)
class ImagePolicy:
    """What images the gateway accepts. ``max_bytes``: encoded size of one image; ``max_pixels``:
    width x height after decoding (also a decompression-bomb guard); ``max_images``: per request;
    ``local_dirs``: directories ``file://`` URLs may point into (none: refused); ``allow_remote``:
    fetch ``http(s)`` URLs (off: refused), with ``remote_timeout_s``."""

    max_bytes: int = 10 * 1024 * 1024
    max_pixels: int = 4096 * 4096
    max_images: int = 16
    local_dirs: tuple[Path, ...] = ()
    allow_remote: bool = False
    remote_timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class ImageData:
    """One decoded, checked image: its bytes as sent, their sha256, format, size."""

    sha256: str
    media_type: str
    data: bytes = field(repr=False)
    width: int
    height: int

    def pil(self) -> Any:
        """The image as a PIL RGB image (what processors take)."""
        from PIL import Image

        with Image.open(io.BytesIO(self.data)) as img:
            return img.convert("RGB")

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES


def iter_image_parts(messages: Any) -> Iterator[dict[str, Any]]:
    """The image parts of messages (or of one message's content), in order."""
    for message in messages if isinstance(messages, list) else [messages]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for part in content:
                if is_image_part(part):
                    yield part


def image_part_source(part: dict[str, Any]) -> tuple[str, str | None]:
    """``(kind, value)`` of an image part: kind is ``data`` (a data URL), ``base64`` (Anthropic's
    source: value is the payload), ``ref`` (a stored reference: value is the sha256), ``file``,
    ``remote`` or ``unsupported``. For ``base64`` the media type is in ``part["source"]``."""
    kind = part.get("type")
    if kind == "image":
        source = part.get("source")
        if not isinstance(source, dict):
            raise RenderError("an image block needs a source object")
        if source.get("type") == "base64":
            data = source.get("data")
            if not isinstance(data, str):
                raise RenderError("an image block's base64 source needs a data string")
            if data.startswith(IMAGE_REF_PREFIX):
                return "ref", data[len(IMAGE_REF_PREFIX):]
            return "base64", data
        url = source.get("url") if source.get("type") == "url" else None
    elif kind == "input_image":
        url = part.get("image_url")
        if url is None and part.get("file_id") is not None:
            return "unsupported", "file_id"
    else:
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
    if not isinstance(url, str) or not url:
        raise RenderError(f"an {kind} content part needs an image URL string")
    if url.startswith(IMAGE_REF_PREFIX):
        return "ref", url[len(IMAGE_REF_PREFIX):]
    if url.startswith("data:"):
        return "data", url
    if url.startswith("file://"):
        return "file", url
    if url.startswith(("http://", "https://")):
        return "remote", url
    return "unsupported", url


def _b64(payload: str) -> bytes:
    try:
        return base64.b64decode(payload.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RenderError(f"the image is not valid base64 ({exc})") from exc


def image_identity(part: dict[str, Any]) -> str:
    """What an image part shows, independent of its shape: ``sha256:<hex>`` for inline bytes and
    stored references (so a data URL and its stored reference compare equal), the URL otherwise.
    Raises :class:`RenderError` for an image part that cannot be read."""
    kind, value = image_part_source(part)
    if kind == "ref":
        return f"sha256:{value}"
    if kind == "data":
        match = _DATA_URL.match(value or "")
        if match is None:
            raise RenderError("an image data URL must look like data:image/png;base64,<data>")
        return f"sha256:{hashlib.sha256(_b64(match['data'])).hexdigest()}"
    if kind == "base64":
        return f"sha256:{hashlib.sha256(_b64(value or '')).hexdigest()}"
    return f"url:{value}"


def image_ref(sha256: str) -> str:
    return f"{IMAGE_REF_PREFIX}{sha256}"


def _raw_bytes(part: dict[str, Any], policy: ImagePolicy, resolve_ref: RefResolver | None) -> bytes:
    kind, value = image_part_source(part)
    if kind == "data":
        match = _DATA_URL.match(value or "")
        if match is None:
            raise RenderError("an image data URL must look like data:image/png;base64,<data>")
        if len(match["data"]) > policy.max_bytes * 4 // 3 + 4:
            raise RenderError(f"the image is larger than the limit of {policy.max_bytes} bytes")
        return _b64(match["data"])
    if kind == "base64":
        if len(value or "") > policy.max_bytes * 4 // 3 + 4:
            raise RenderError(f"the image is larger than the limit of {policy.max_bytes} bytes")
        return _b64(value or "")
    if kind == "ref":
        if resolve_ref is None or not _SHA256.match(value or ""):
            raise RenderError(f"the image reference {value!r} cannot be resolved here")
        try:
            return resolve_ref(value or "")
        except (OSError, KeyError) as exc:
            raise RenderError(f"the stored image {value} is missing ({exc})") from exc
    if kind == "file":
        return _local_file(value or "", policy)
    if kind == "remote":
        return _remote(value or "", policy)
    raise RenderError(f"unsupported image source {value!r}: send a data URL (data:image/png;base64,...)")


def _local_file(url: str, policy: ImagePolicy) -> bytes:
    if not policy.local_dirs:
        raise RenderError("file:// image URLs are disabled on this gateway (allow directories with the "
                          "image_local_dirs setting); send a data URL")
    path = Path(urllib.request.url2pathname(url[len("file://"):])).resolve()
    if not any(path.is_relative_to(Path(d).resolve()) for d in policy.local_dirs):
        raise RenderError(f"file {path} is outside the directories images may be read from")
    try:
        size = path.stat().st_size
        if size > policy.max_bytes:
            raise RenderError(f"the image is larger than the limit of {policy.max_bytes} bytes")
        return path.read_bytes()
    except OSError as exc:
        raise RenderError(f"cannot read image file {path}: {exc.strerror}") from exc


def _remote(url: str, policy: ImagePolicy) -> bytes:
    if not policy.allow_remote:
        raise RenderError("remote image URLs are not fetched by this gateway (enable with the "
                          "image_allow_remote setting); send the image as a data URL")
    try:
        with urllib.request.urlopen(url, timeout=policy.remote_timeout_s) as response:  # opted in by the setting
            data = response.read(policy.max_bytes + 1)
    except (OSError, ValueError) as exc:
        raise RenderError(f"cannot fetch image {url}: {exc}") from exc
    if len(data) > policy.max_bytes:
        raise RenderError(f"the image is larger than the limit of {policy.max_bytes} bytes")
    return data


def load_image(part: dict[str, Any], policy: ImagePolicy, resolve_ref: RefResolver | None = None) -> ImageData:
    """Read, decode and check one image part. Raises :class:`RenderError` on anything wrong."""
    from PIL import Image, UnidentifiedImageError

    data = _raw_bytes(part, policy, resolve_ref)
    if len(data) > policy.max_bytes:
        raise RenderError(f"the image is larger than the limit of {policy.max_bytes} bytes")
    if not data:
        raise RenderError("the image is empty")
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            if width * height > policy.max_pixels:
                raise RenderError(f"the image has {width}x{height} pixels, more than the limit of "
                                  f"{policy.max_pixels}")
            media_type = MEDIA_TYPES.get(img.format or "")
            if media_type is None:
                raise RenderError(f"image format {img.format} is not supported: use PNG, JPEG, GIF or WEBP")
            img.load()  # decodes everything: truncated or corrupt data fails here
    except RenderError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise RenderError(f"the image cannot be decoded ({type(exc).__name__}: {exc})") from exc
    if width < 1 or height < 1:
        raise RenderError("the image has no pixels")
    return ImageData(sha256=hashlib.sha256(data).hexdigest(), media_type=media_type, data=data,
                     width=width, height=height)
