"""Screenshot pages of a running `agentr1 view` for the docs (headless Chromium through Playwright, driven
the way the viewer's browser tests drive it: agentr1.viewer.browser).

Usage: python scripts/viewer_screenshot.py URL OUT.png [URL OUT.png ...] [--width 1360] [--max-height 4000]
Each page is loaded until the viewer says it is ready and nothing more loads, then saved down to the end of its
content (at most --max-height pixels: a long session is cut there, with its first steps shown).
"""

from __future__ import annotations

import argparse

from agentr1.viewer import CHROMIUM, CHROMIUM_ARGS, ViewerPageError, content_height, open_viewer_page


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
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": args.width, "height": 900}).new_page()
        for url, out in zip(args.pairs[::2], args.pairs[1::2], strict=True):
            try:
                open_viewer_page(page, url, settle=True)
            except ViewerPageError as exc:
                raise SystemExit(str(exc)) from exc
            bottom = content_height(page)
            height = max(200, min(bottom, args.max_height))
            page.screenshot(path=out, full_page=True, clip={"x": 0, "y": 0, "width": args.width, "height": height})
            print(f"{out}: {args.width}x{height} (page {bottom} px)")
        browser.close()


if __name__ == "__main__":
    main()
