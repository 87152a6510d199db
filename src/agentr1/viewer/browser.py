"""Driving viewer pages in a headless browser: what the browser tests and the docs' screenshots
(``scripts/viewer_screenshot.py``) share. The functions take a Playwright page; this module does not
import Playwright itself (a test dependency)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "ViewerPageError", "content_height", "open_viewer_page"]

CHROMIUM = os.environ.get("AGENTR1_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


class ViewerPageError(RuntimeError):
    """The viewer rendered its error box instead of the page."""


def open_viewer_page(page: Any, url: str, *, settle: bool = False) -> None:
    """Load ``url`` and wait until the viewer's app says it is ready; ``settle``: also until nothing more
    loads (parts fetched after the page, e.g. a session's training rows). Raises ViewerPageError with the
    viewer's own message when it shows an error."""
    page.goto(url)
    page.wait_for_selector('#app[data-ready="true"]')
    if settle:
        page.wait_for_load_state("networkidle")
    error = page.query_selector("#app > .error")
    if error is not None:
        raise ViewerPageError(f"{url}: the viewer says {error.inner_text()!r}")


def content_height(page: Any) -> int:
    """Pixels from the top of the document to the end of the page's content (its ``main``)."""
    return int(page.evaluate("Math.ceil(document.querySelector('main').getBoundingClientRect().bottom + window.scrollY)"))
