"""Where a framework's OpenAI-compatible client should point: the one rule every adapter shares."""

from __future__ import annotations

import os

from agentr1.sdk import current_session, gateway_url, install_propagation

# The gateway ignores the key of a call attributed by URL or header; clients just need a non-empty one.
PLACEHOLDER_KEY = "agentr1"


def endpoint(*, follow: bool = False) -> tuple[str, str]:
    """``(base_url, api_key)`` for a client created now.

    Inside a session (``@rollout``, ``with session()``): that session's ``/sessions/{id}/v1`` URL and
    key, so the client is bound to it. Outside any session: the gateway's ``/v1`` (from
    ``configure()`` / ``$AGENTR1_GATEWAY_URL``), and each call then carries whichever session is
    active when it is made (the SDK's header propagation, installed here), or joins an auto
    session when none is.
    """
    install_propagation()
    active = current_session()
    if active is not None:
        return active.base_url, active.api_key
    return f"{gateway_url()}/v1", os.environ.get("AGENTR1_API_KEY") or PLACEHOLDER_KEY
