"""The gateway's uvicorn settings: the access log only at log levels that show it (building each call's line and
dropping it cost ~1-2% of the gateway's CPU at 64 sessions), and the HTTP parser uvicorn picks."""

from __future__ import annotations

import pytest
import uvicorn

from agentr1.gateway.server import uvicorn_options


@pytest.mark.parametrize(("level", "access_log"), [("warning", False), ("error", False), ("info", True),
                                                   ("DEBUG", True), ("trace", True)])
def test_access_log_only_where_the_level_shows_it(level: str, access_log: bool) -> None:
    options = uvicorn_options(log_level=level)
    assert options["access_log"] is access_log and options["log_level"] == level
    config = uvicorn.Config(lambda: None, **options)  # uvicorn accepts them as they are
    assert config.access_log is access_log


def test_uvicorn_parses_http_with_httptools() -> None:
    """httptools is a dependency of the gateway: uvicorn's "auto" picks it over the pure-Python h11."""
    config = uvicorn.Config(lambda: None, **uvicorn_options())
    config.load()
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"
