"""Headless Chromium driven by Selenium: open a page of the site from disk, evaluate
JavaScript in it, collect its errors and every request that leaves the disk, take a
screenshot.

    with Browser() as browser:
        page = browser.open(Path("results/site/index.html"))
        page.evaluate("document.querySelectorAll('a').length")
        page.errors      # the browser log's errors: uncaught exceptions, console.error,
                         # failed loads; one line each, "SOURCE: MESSAGE"
        page.external    # requests to anything but file:/data:/about: URLs (a CDN, say)
        page.screenshot(Path("index.png"), width=1280, height=800)

The browser is Debian's chromium, the driver Debian's chromedriver (`apt-get install
chromium chromium-driver`), both found on PATH ($DEW_CHROMIUM and $DEW_CHROMEDRIVER
first); Selenium is given both, so Selenium Manager never looks for or downloads either.
One page at a time: `open` loads the next page in the same window.

The README's screenshot of uvit's page (docs/images/site-uvit.png), from the committed
records:

    python -m dew.bench.site results --out results/site
    python tests/infra/browser.py --page results/site/arch/uvit.html \\
        --screenshot docs/images/site-uvit.png --width 1100 --height 700 --overwrite

Exit 0: written, the page logged no error and fetched nothing; 1: written, but the page
has errors or requests that leave the disk (printed); 2: bad input or no browser.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from dew.bench.common.cli import UsageError
from dew.bench.common.files import atomic_write, check_output_file
from dew.bench.runtime.sockets import make_folder

PROG = "python tests/infra/browser.py"
CHROMIUM = ("DEW_CHROMIUM", ("chromium", "chromium-browser", "google-chrome"))
CHROMEDRIVER = ("DEW_CHROMEDRIVER", ("chromedriver",))
# Quiet and offline: nothing of Chromium's own (updates, sync, metrics) goes on the network.
FLAGS = (
    "--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--hide-scrollbars",
)  # fmt: skip
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")
TIMEOUT_S = 60


class BrowserError(RuntimeError):
    """No browser or driver, or the browser did not start (one line)."""


def _find(spec: tuple[str, tuple[str, ...]]) -> str | None:
    variable, names = spec
    candidates = [os.environ.get(variable), *names]
    return next((shutil.which(name) for name in candidates if name and shutil.which(name)), None)


def find_chromium() -> str | None:
    """The Chromium binary on PATH ($DEW_CHROMIUM first), or None."""
    return _find(CHROMIUM)


def find_chromedriver() -> str | None:
    """chromedriver on PATH ($DEW_CHROMEDRIVER first), or None."""
    return _find(CHROMEDRIVER)


def missing() -> str | None:
    """What is missing to drive a browser, as one line with its fix (None: nothing)."""
    lacking = [
        f"{what} is not installed (apt-get install {package})"
        for what, package, found in (
            ("chromium", "chromium", find_chromium()),
            ("chromedriver", "chromium-driver", find_chromedriver()),
        )
        if found is None
    ]
    return "; ".join(lacking) or None


class Browser:
    """One headless Chromium under chromedriver, with chromedriver's fresh temporary
    profile; both quit on exit."""

    def __init__(self, timeout: float = TIMEOUT_S):
        problem = missing()
        if problem:
            raise BrowserError(problem)
        self.chromium, self.chromedriver = find_chromium(), find_chromedriver()
        self.timeout = timeout
        self.driver = None
        self.current: Page | None = None

    def __enter__(self) -> Browser:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = self.chromium
        for flag in FLAGS:
            options.add_argument(flag)
        if os.geteuid() == 0:
            options.add_argument("--no-sandbox")  # Chromium's sandbox refuses root
        # The console and the network: the browser log has the errors, the performance log
        # DevTools' Network events.
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        # Chromium binds its singleton socket in TMPDIR: under a long one (a SLURM job's
        # scratch, a deep pytest base) it cannot start. Its TMPDIR is a short folder.
        self.scratch = make_folder()
        service = Service(executable_path=self.chromedriver,
                          env={**os.environ, "TMPDIR": self.scratch})  # fmt: skip
        try:
            self.driver = webdriver.Chrome(options=options, service=service)
        except WebDriverException as error:
            first = (error.msg or str(error)).strip().splitlines()[:1] or ["no message"]
            raise BrowserError(f"{self.chromium} under {self.chromedriver}: {first[0]}") from None
        self.driver.set_page_load_timeout(self.timeout)
        self.driver.set_script_timeout(self.timeout)
        return self

    def __exit__(self, *exc) -> None:
        if self.driver is not None:
            self.driver.quit()
            self.driver = None
        if getattr(self, "scratch", None):
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def open(self, page: Path) -> Page:
        """Load `page` (a file) in the window, returning once its load event has fired.
        What the previous page logged is read before, and left to that page."""
        if self.current is not None:
            self.current.collect()
        self.current = Page(self, Path(page).resolve().as_uri())
        self.driver.get(self.current.url)
        self.current.collect()
        return self.current


class Page:
    """The page in the browser's window; its `errors` and `external` grow with whatever
    it logs until the next `open`."""

    def __init__(self, browser: Browser, url: str):
        self.browser = browser
        self.url = url
        self._errors: list[str] = []
        self._external: list[str] = []

    @property
    def driver(self):
        if self.browser.current is not self:
            raise BrowserError(f"{self.url} is no longer the open page")
        return self.browser.driver

    @property
    def errors(self) -> list[str]:
        if self.browser.current is self:
            self.collect()
        return list(self._errors)

    @property
    def external(self) -> list[str]:
        if self.browser.current is self:
            self.collect()
        return list(self._external)

    def collect(self) -> None:
        """Take in the new entries of the browser's logs (reading a log empties it)."""
        for entry in self.driver.get_log("browser"):
            if entry.get("level") == "SEVERE":
                self._errors.append(f"{entry.get('source')}: {entry.get('message')}")
        for entry in self.driver.get_log("performance"):
            event = json.loads(entry["message"])["message"]
            if event.get("method") == "Network.requestWillBeSent":
                url = event["params"]["request"]["url"]
                if not url.startswith(LOCAL_SCHEMES):
                    self._external.append(url)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-able values)."""
        return self.driver.execute_script(f"return (\n{expression}\n);")

    def screenshot(self, path: Path, *, width: int = 1280, height: int = 800) -> Path:
        """A PNG of the page's top `height` pixels at `width` CSS pixels, written atomically."""
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        try:
            png = self.driver.get_screenshot_as_png()
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        return atomic_write(path, png)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Open a page of the site in headless Chromium, print its script errors "
        "and requests that leave the disk, and write a screenshot.",
    )
    parser.add_argument("--page", required=True, type=Path, help="the HTML file to open")
    parser.add_argument("--screenshot", required=True, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing PNG")
    args = parser.parse_args(argv)
    try:
        if not args.page.is_file():
            raise UsageError(f"--page {args.page}: no such file")
        out = check_output_file(args.screenshot, flag="--screenshot", overwrite=args.overwrite)
        with Browser() as browser:
            page = browser.open(args.page)
            page.screenshot(out, width=args.width, height=args.height)
            problems = page.errors + [f"external request: {url}" for url in page.external]
    except (UsageError, BrowserError) as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    for line in problems:
        print(f"{args.page}: {line}", file=sys.stderr)
    print(f"screenshot: {out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
