"""The site in a real browser: headless Chromium (Debian's package) opens every page of a
site built from the repository's records, from disk, and the DOM is checked: every
architecture of the records is on the index and has its page with a chart, the bundled
script ran, no page logs a script error or fetches anything but its own files.
Screenshots of the index and of one architecture page are saved ($DEW_SCREENSHOT_DIR, or
the test's temporary directory) and their paths printed.

Skipped only where Chromium is missing and this is not CI (CI installs it: .ci/run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dew.bench.site import build
from dew.bench.site.browser import Chromium, find_chromium
from dew.bench.site.records import load_all

ROOT = Path(__file__).resolve().parents[2]

if find_chromium() is None:
    if os.environ.get("CI"):
        pytest.fail("CI needs chromium for the site's browser test: apt-get install chromium")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    assert build.main([str(ROOT / "results"), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def browser():
    with Chromium() as chromium:
        yield chromium


def labels_of_records() -> set[str]:
    """Every row label of the step records the site read."""
    entries = load_all([ROOT / "results"]).entries
    return {row.label() for e in entries if e.record.kind == "step" for row in e.record.rows}


def screenshot_dir(tmp_path: Path) -> Path:
    return Path(os.environ.get("DEW_SCREENSHOT_DIR") or tmp_path)


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
    page.close()


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
        page.close()
    arch = browser.open(site / "arch" / "simple-dit.html")
    shot = arch.screenshot(screenshot_dir(tmp_path) / "site-simple-dit.png", width=1280, height=900)
    print(f"screenshot: {shot}")
    arch.close()


def test_a_script_error_or_a_network_fetch_would_be_caught(browser, tmp_path):
    """The checks above can fail: a page that throws and fetches from a CDN is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><head><script src='https://cdn.invalid/x.js'></script>"
        "<script>console.error('boom'); undefinedFunction();</script></head><body></body></html>"
    )
    page = browser.open(bad)
    assert any("undefinedFunction" in line for line in page.errors)
    assert any("console.error: boom" in line for line in page.errors)
    assert page.external == ["https://cdn.invalid/x.js"]
    page.close()


def test_the_screenshot_command_writes_once_and_refuses_to_replace(site, tmp_path, capsys):
    from dew.bench.site import browser as command

    png = tmp_path / "index.png"
    args = ["--page", str(site / "index.html"), "--screenshot", str(png)]
    assert command.main(args) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    before = png.read_bytes()
    assert command.main(args) == 2  # an existing file needs --overwrite
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert png.read_bytes() == before
    assert command.main(["--page", str(tmp_path / "none.html"), "--screenshot", "x.png"]) == 2
