"""Headless Chromium over the DevTools protocol: open a page of the site from disk, read its
DOM, collect every script error and every request that leaves the disk, take a screenshot.

    with Chromium() as browser:
        page = browser.open(Path("results/site/index.html"))
        page.errors          # uncaught exceptions, console.error, failed loads: one line each
        page.external        # requests to anything but file:/data: URLs (a CDN, say)
        page.evaluate("document.querySelectorAll('a').length")
        page.screenshot(Path("index.png"), width=1280, height=800)

`python -m dew.bench.site.browser PAGE.html --screenshot PNG` takes one screenshot (the
README's). Chromium is Debian's package (`apt-get install chromium`); the websocket
client is websocket-client, in the dev extra. Both are loaded only here.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from dew.bench.common import cli
from dew.bench.common.cli import UsageError
from dew.bench.common.files import atomic_write, check_output_file

PROG = "python -m dew.bench.site.browser"
NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--remote-debugging-port=0", "--remote-allow-origins=*",
)  # fmt: skip
TIMEOUT_S = 60.0


def find_chromium() -> str | None:
    """The Chromium binary on PATH ($DEW_CHROMIUM first), or None."""
    candidates = [os.environ.get("DEW_CHROMIUM"), *NAMES]
    return next((shutil.which(name) for name in candidates if name and shutil.which(name)), None)


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless Chromium with a fresh profile, closed (and its profile removed) on exit."""

    def __init__(self, binary: str | None = None, timeout: float = TIMEOUT_S):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise BrowserError("chromium is not installed: apt-get install chromium")
        self.timeout = timeout
        self.profile = Path(tempfile.mkdtemp(prefix="dew-chromium-"))
        self.process: subprocess.Popen | None = None
        self.log = self.profile / "chromium.log"

    def __enter__(self) -> Chromium:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [self.binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.port = self._port()
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _port(self) -> int:
        """Chromium writes its DevTools port to the profile once it listens."""
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
                raise BrowserError(f"chromium exited {self.process.returncode}: {tail[0]}")
            text = marker.read_text() if marker.is_file() else ""
            if text.strip():
                return int(text.split()[0])
            time.sleep(0.1)
        raise BrowserError(f"chromium opened no DevTools port within {self.timeout:.0f} s")

    def open(self, page: Path) -> Page:
        """Load `page` (a file) in a new tab and wait for its load event."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT"
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            target = json.load(response)
        tab = Page(target["webSocketDebuggerUrl"], self.timeout)
        tab.load(Path(page).resolve().as_uri())
        return tab


@dataclasses.dataclass
class Page:
    """One tab, driven over its DevTools websocket."""

    url: str
    timeout: float
    errors: list[str] = dataclasses.field(default_factory=list)
    external: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        import websocket

        self.socket = websocket.create_connection(
            self.url, timeout=self.timeout, suppress_origin=True
        )
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        ask = self.next_id
        self.socket.send(json.dumps({"id": ask, "method": method, "params": params}))
        while True:
            message = self._receive()
            if message.get("id") == ask:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error'].get('message')}")
                return message.get("result", {})

    def _receive(self) -> dict:
        message = json.loads(self.socket.recv())
        if "method" in message:
            self._note(message["method"], message.get("params", {}))
        return message

    def _note(self, method: str, params: dict) -> None:
        """Keep what matters of an event: errors and requests that leave the disk."""
        self.events.append({"method": method})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            self.errors.append(f"uncaught: {str(text).splitlines()[0]} ({details.get('url')})")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            self.errors.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(("file:", "data:", "about:")):
                self.external.append(url)

    def load(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} did not load within {self.timeout:.0f} s")
            self._receive()

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-able values)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, path: Path, *, width: int = 1280, height: int = 800) -> Path:
        """A PNG of the page's top `height` pixels at `width`, written atomically."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        shot = self.call("Page.captureScreenshot", format="png")
        return atomic_write(path, base64.b64decode(shot["data"]))

    def close(self) -> None:
        self.socket.close()


@dataclasses.dataclass
class Args:
    """Open a page of the site in headless Chromium, print its script errors and write a
    screenshot. Exit 0: no error; 1: the page has script errors or leaves the disk; 2: bad
    input."""

    page: str
    """the HTML file to open (e.g. results/site/index.html)"""
    screenshot: str
    """the PNG to write"""
    width: int = 1280
    height: int = 800
    overwrite: bool = False
    """let --screenshot replace an existing file"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _main(cli.parse(Args, argv, prog=PROG)))


def _main(args: Args) -> int:
    page_path = Path(args.page)
    if not page_path.is_file():
        raise UsageError(f"--page {page_path}: no such file")
    out = check_output_file(args.screenshot, flag="--screenshot", overwrite=args.overwrite)
    try:
        with Chromium() as browser:
            page = browser.open(page_path)
            page.screenshot(out, width=args.width, height=args.height)
            page.close()
    except BrowserError as error:
        raise UsageError(str(error)) from None
    for line in page.errors + [f"external request: {url}" for url in page.external]:
        print(f"{page_path}: {line}", file=sys.stderr)
    print(f"screenshot: {out}")
    return cli.EXIT_CHANGED if page.errors or page.external else cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
