"""A headless Chromium driven through ChromeDriver's W3C WebDriver HTTP API with the standard
library only (no selenium, no playwright): enough to open a page, run a script in it, click an
element, read its text, read the console and take a screenshot.

``Browser.start()`` raises ``Unavailable`` (with the reason) when Chromium or ChromeDriver is not
installed or will not start; the tests skip on it. ``.ci/run`` installs Debian's ``chromium``
and ``chromium-driver`` so that CI runs them."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

CHROMIUM = ("/usr/bin/chromium", "chromium", "chromium-browser")
CHROMEDRIVER = ("/usr/bin/chromedriver", "chromedriver")
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference
# The flags this machine needs (closed network, no GPU, root): see the environment notes.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


class Unavailable(Exception):
    """No browser can be driven here (the reason is the message)."""


def _which(names) -> str | None:
    for n in names:
        p = shutil.which(n) if not os.path.isabs(n) else (n if os.access(n, os.X_OK) else None)
        if p:
            return p
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    def __init__(self, driver: subprocess.Popen, port: int, session: str, profile: str):
        self.driver, self.port, self.session, self.profile = driver, port, session, profile

    # --- lifecycle ----------------------------------------------------------------------------

    @classmethod
    def start(cls, width: int = 1400, height: int = 860) -> Browser:
        chromium, chromedriver = _which(CHROMIUM), _which(CHROMEDRIVER)
        if chromium is None or chromedriver is None:
            raise Unavailable(
                "Chromium and ChromeDriver are not installed "
                "(apt-get install chromium chromium-driver; .ci/run does it)"
            )
        port = _free_port()
        driver = subprocess.Popen(
            [chromedriver, f"--port={port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        profile = tempfile.mkdtemp(prefix="autodiag-chromium-")
        try:
            _wait_ready(port)
            caps = {
                "capabilities": {
                    "alwaysMatch": {
                        "browserName": "chrome",
                        "goog:chromeOptions": {
                            "binary": chromium,
                            "args": FLAGS
                            + [f"--user-data-dir={profile}", f"--window-size={width},{height}"],
                        },
                        "goog:loggingPrefs": {"browser": "ALL"},
                    }
                }
            }
            value = _call(port, "POST", "/session", caps)
        except BaseException as e:
            driver.kill()
            driver.wait()
            shutil.rmtree(profile, ignore_errors=True)
            if isinstance(e, Unavailable):
                raise
            raise Unavailable(f"Chromium did not start: {e}") from e
        return cls(driver, port, value["sessionId"], profile)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call("DELETE", "")
        self.driver.terminate()
        try:
            self.driver.wait(10)
        except subprocess.TimeoutExpired:
            self.driver.kill()
            self.driver.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- commands -----------------------------------------------------------------------------

    def _call(self, method: str, path: str, body=None):
        return _call(self.port, method, f"/session/{self.session}{path}", body)

    def open(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    def run(self, script: str, *args):
        """Run ``script`` (a function body: ``return ...``) in the page."""
        return self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> str:
        return self._call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def click(self, css: str) -> None:
        self._call("POST", f"/element/{self.find(css)}/click", {})

    def text(self, css: str) -> str:
        return self._call("GET", f"/element/{self.find(css)}/text")

    def type(self, css: str, text: str) -> None:
        self._call("POST", f"/element/{self.find(css)}/value", {"text": text})

    def console(self) -> list[dict]:
        """The browser's console entries since the last call (level, message)."""
        return self._call("POST", "/se/log", {"type": "browser"})

    def screenshot(self, path: str) -> None:
        png = base64.b64decode(self._call("GET", "/screenshot"))
        with open(path, "wb") as f:
            f.write(png)


def _call(port: int, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"{}").get("value")
    except urllib.error.HTTPError as e:
        detail = json.loads(e.read() or b"{}").get("value", {})
        raise RuntimeError(
            f"WebDriver {method} {path}: {detail.get('error')}: {detail.get('message')}"
        ) from None


def _wait_ready(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with contextlib.suppress(OSError, ValueError):
            if _call(port, "GET", "/status").get("ready"):
                return
        time.sleep(0.1)
    raise Unavailable(f"ChromeDriver did not answer on port {port} within {timeout:g} s")
