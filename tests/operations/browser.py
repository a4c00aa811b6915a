"""Headless Chromium for the web UI tests: Debian's ``chromium`` driven by Playwright (``playwright`` from PyPI,
which talks to the browser over the DevTools protocol; no browser download: ``scripts/setup.sh`` installs
Debian's package and Playwright is pointed at ``/usr/bin/chromium``)."""

from __future__ import annotations

import contextlib
import os
import shutil

import pytest

#: flags of a headless Chromium on a machine without network access (no background fetches)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed: run scripts/setup.sh (it installs Debian's chromium)")
    return path


@contextlib.contextmanager
def chromium():
    """A started headless Chromium (Playwright ``Browser``), closed afterwards."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - a test-only dependency

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page, name: str) -> None:
    """Save a full-page PNG as ``$QJOURNAL_SCREENSHOT_DIR/<name>.png`` when that variable is set (how the
    screenshots in docs/images were made: ``QJOURNAL_SCREENSHOT_DIR=docs/images pytest tests/operator``)."""
    out = os.environ.get("QJOURNAL_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        page.screenshot(path=os.path.join(out, f"{name}.png"), full_page=True)
