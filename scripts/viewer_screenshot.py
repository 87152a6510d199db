"""Screenshot pages of a running `agentr1 view` for the docs (headless Chromium through Playwright, as the
viewer's browser tests drive it).

Usage: python scripts/viewer_screenshot.py URL OUT.png [URL OUT.png ...] [--width 1360] [--max-height 4000]
Each page is loaded until the viewer says it is ready and nothing more loads, then saved down to the end of its content (at most
--max-height pixels: a long session is cut there, with its first steps shown).
"""

from __future__ import annotations

import argparse
import os

CHROMIUM = os.environ.get("AGENTR1_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="+", help="URL OUT.png, repeated")
    parser.add_argument("--width", type=int, default=1360)
    parser.add_argument("--max-height", type=int, default=4000)
    args = parser.parse_args()
    if len(args.pairs) % 2:
        parser.error("give URL OUT.png pairs")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_context(viewport={"width": args.width, "height": 900}).new_page()
        for url, out in zip(args.pairs[::2], args.pairs[1::2], strict=True):
            page.goto(url)
            page.wait_for_selector('#app[data-ready="true"]')
            page.wait_for_load_state("networkidle")  # parts that load after the page (a session's training rows)
            error = page.query_selector("#app > .error")
            if error is not None:
                raise SystemExit(f"{url}: the viewer says {error.inner_text()!r}")
            bottom = page.evaluate("Math.ceil(document.querySelector('main').getBoundingClientRect().bottom"
                                   " + window.scrollY)")
            height = max(200, min(bottom, args.max_height))
            page.screenshot(path=out, full_page=True, clip={"x": 0, "y": 0, "width": args.width, "height": height})
            print(f"{out}: {args.width}x{height} (page {bottom} px)")
        browser.close()


if __name__ == "__main__":
    main()
