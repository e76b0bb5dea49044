"""The site in a real browser: headless Chromium (Debian's chromium, driven by Selenium
through Debian's chromedriver: tests/infra/browser.py) opens every page of a site built
from the repository's records, from disk, and the DOM is checked: every architecture of
the records is on the index and has its page with a chart, the bundled script ran, no
page logs a script error or fetches anything but its own files. Screenshots of the index
and of one architecture page are saved ($DEW_SCREENSHOT_DIR, or the test's temporary
directory) and their paths printed.

Skipped only where chromium or chromedriver is missing and this is not CI (CI installs
them: .ci/run)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from infra import browser as driver
from infra.browser import Browser

from dew.bench.site.records import load_all

ROOT = Path(__file__).resolve().parents[3]

MISSING = driver.missing()
if MISSING:
    if os.environ.get("CI"):
        pytest.fail(f"CI needs a browser for the site's browser test: {MISSING}")
    pytest.skip(MISSING, allow_module_level=True)


@pytest.fixture(scope="module")
def site(repository_site):
    return repository_site  # results/ built by `python -m dew.bench.site` (conftest.py)


@pytest.fixture(scope="module")
def browser():
    with Browser() as chromium:
        yield chromium


def labels_of_records() -> set[str]:
    """Every row label of the step records the site read."""
    entries = load_all([ROOT / "results"]).entries
    return {row.label() for e in entries if e.record.kind == "step" for row in e.record.rows}


def screenshot_dir(tmp_path: Path) -> Path:
    return Path(os.environ.get("DEW_SCREENSHOT_DIR") or tmp_path)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's header."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def test_index_lists_every_architecture_with_no_script_error(site, browser, tmp_path):
    page = browser.open(site / "index.html")
    assert page.evaluate("document.body.dataset.ready") == "true"  # site.js ran
    shown = set(page.evaluate(
        "[...document.querySelectorAll('ul.archs a[data-architecture]')]"
        ".map(a => a.dataset.architecture)"
    ))  # fmt: skip
    expected = labels_of_records()
    assert expected and shown == expected
    latest = page.evaluate("document.querySelectorAll('#latest tbody tr').length")
    assert latest >= len(
        page.evaluate(
            "[...new Set([...document.querySelectorAll("
            "'#latest tbody tr')].map(r => r.dataset.architecture))]"
        )
    )
    shot = page.screenshot(screenshot_dir(tmp_path) / "site-index.png", width=1280, height=800)
    assert png_size(shot) == (1280, 800)
    print(f"screenshot: {shot}")
    # The filter hides what does not match and shows it all again.
    page.evaluate("(f => { f.value = 'uvit'; f.dispatchEvent(new Event('input')); })"
                  "(document.getElementById('filter'))")  # fmt: skip
    visible = page.evaluate(
        "[...document.querySelectorAll('#latest tbody tr')]"
        ".filter(r => !r.hidden).map(r => r.dataset.architecture)"
    )
    assert visible and set(visible) == {"uvit"}
    assert page.errors == [] and page.external == []


def test_every_page_loads_without_errors_and_each_architecture_has_its_chart(
    site, browser, tmp_path
):
    for html in sorted(site.rglob("*.html")):
        page = browser.open(html)
        assert page.evaluate("document.body.dataset.ready") == "true", html
        if html.parent.name == "arch":
            title = page.evaluate("document.querySelector('h1').textContent")
            timed = page.evaluate("document.querySelectorAll('section.series').length")
            charts = page.evaluate("document.querySelectorAll('figure.chart svg').length")
            assert title and (charts == 1 or timed == 0), html
        assert page.errors == [], (html, page.errors)
        assert page.external == [], (html, page.external)
    arch = browser.open(site / "arch" / "simple-dit.html")
    shot = arch.screenshot(screenshot_dir(tmp_path) / "site-simple-dit.png", width=1280, height=900)
    assert png_size(shot) == (1280, 900)
    print(f"screenshot: {shot}")


def test_a_script_error_or_a_network_fetch_would_be_caught(browser, tmp_path):
    """The checks above can fail: a page that throws and fetches from a CDN is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><head><script src='https://cdn.invalid/x.js'></script>"
        "<script>console.error('boom'); undefinedFunction();</script></head><body></body></html>"
    )
    page = browser.open(bad)
    errors = page.errors  # "SOURCE: MESSAGE", as Chrome's browser log names them
    assert any(line.startswith("javascript: ") and "undefinedFunction" in line for line in errors)
    assert any(line.startswith("console-api: ") and '"boom"' in line for line in errors)
    assert any(line.startswith("network: https://cdn.invalid/x.js") for line in errors)
    assert page.external == ["https://cdn.invalid/x.js"]
    # An error thrown after the load, and a fetch then, are caught too; the next page
    # starts clean.
    page.evaluate("setTimeout(() => { throw new Error('later'); }, 0) && null")
    page.evaluate("new Promise(done => setTimeout(done, 50))")
    page.evaluate("fetch('https://cdn.invalid/late.json').catch(() => null) && null")
    page.evaluate("new Promise(done => setTimeout(done, 200))")
    assert any("Error: later" in line for line in page.errors), page.errors
    assert page.external == ["https://cdn.invalid/x.js", "https://cdn.invalid/late.json"]
    clean = tmp_path / "clean.html"
    clean.write_text("<!DOCTYPE html><html><body><p>nothing</p></body></html>")
    after = browser.open(clean)
    assert after.errors == [] and after.external == []


def test_the_screenshot_command_writes_once_and_refuses_to_replace(site, tmp_path, capsys):
    """`python tests/infra/browser.py --page PAGE --screenshot PNG`, as the README's
    screenshot is made."""
    png = tmp_path / "index.png"
    args = ["--page", str(site / "index.html"), "--screenshot", str(png)]
    assert driver.main([*args, "--width", "1100", "--height", "700"]) == 0
    assert png_size(png) == (1100, 700)
    before = png.read_bytes()
    assert driver.main(args) == 2  # an existing file needs --overwrite
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert png.read_bytes() == before
    assert driver.main(["--page", str(tmp_path / "none.html"), "--screenshot", "x.png"]) == 2
    assert "none.html: no such file" in capsys.readouterr().err
    # A page with a script error: the screenshot is written, the error printed, exit 1.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>undefinedFunction();</script></body>")
    assert driver.main(["--page", str(bad), "--screenshot", str(tmp_path / "bad.png")]) == 1
    assert "undefinedFunction" in capsys.readouterr().err
    assert png_size(tmp_path / "bad.png") == (1280, 800)
