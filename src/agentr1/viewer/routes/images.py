"""Images of stored steps, by content hash: what the session page shows inline in each step."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response

from agentr1.store import sniff_media_type
from agentr1.viewer.state import bad_request, not_found, viewer

router = APIRouter(prefix="/images", tags=["images"])
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@router.get("/{sha256}", response_class=Response, responses={200: {"content": {"image/png": {}}}})
def get_image(sha256: str, request: Request) -> Response:
    """The bytes of a stored image (``agentr1-image:<sha256>`` in the step's messages)."""
    if not _SHA256.match(sha256):
        raise bad_request("an image is named by the sha256 of its bytes (64 lowercase hex digits)", "sha256")
    try:
        data = viewer(request).store.images.get(sha256)
    except KeyError as exc:
        raise not_found(f"no stored image {sha256}") from exc
    # content-addressed: the bytes behind a hash never change
    return Response(data, media_type=sniff_media_type(data), headers={"Cache-Control": "public, max-age=31536000, immutable"})
