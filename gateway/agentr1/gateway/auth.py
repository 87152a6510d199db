"""Who may do what. Admin routes need the admin key; a session's own routes accept the admin key
or that session's key. Without an admin key configured, admin routes are off and session routes
are open (a single-user, loopback gateway)."""

from __future__ import annotations

import hmac

from fastapi import Request

from agentr1.gateway.errors import APIError
from agentr1.gateway.sessions import KEY_PREFIX, _bearer


def require_admin(request: Request) -> None:
    expected = request.app.state.gateway.settings.admin_key
    if not expected:
        raise APIError(403, "admin endpoints are disabled: start the gateway with --admin-key", code="admin_disabled")
    given = _bearer(request) or ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise APIError(401, "admin key required (Authorization: Bearer <admin key>)", code="invalid_api_key")


async def require_session_access(request: Request, session_id: str) -> None:
    gw = request.app.state.gateway
    admin = gw.settings.admin_key
    if not admin:
        return
    given = _bearer(request) or ""
    if hmac.compare_digest(given.encode(), admin.encode()):
        return
    if given.startswith(KEY_PREFIX) and await gw.sessions.session_for_key(given) == session_id:
        return
    raise APIError(403, f"this key may not access session {session_id}", code="forbidden")
