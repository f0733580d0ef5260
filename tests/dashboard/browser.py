"""Headless Chromium driven over its DevTools protocol (websocket-client), for the browser tests.

Debian's `chromium` (installed by .ci/run) is started with a fresh profile and no background
traffic; `Browser.page()` opens a tab whose console errors and uncaught exceptions are
collected, so a test can assert that a page loaded cleanly. `find_chromium()` returns None
where no browser is installed: the tests then skip with one line saying so.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,1600", "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    """One tab: commands in, events collected (console errors, exceptions, requests)."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self._next = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.loads = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def _read(self) -> None:
        while True:
            try:
                msg = json.loads(self.ws.recv())
            except Exception:  # noqa: BLE001 (the socket closed: the reader ends)
                with self._cond:
                    self._cond.notify_all()
                return
            with self._cond:
                if "id" in msg:
                    self._replies[msg["id"]] = msg
                else:
                    self._event(msg["method"], msg.get("params", {}))
                self._cond.notify_all()

    def _event(self, method: str, p: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append("exception: " + d.get("exception", {}).get("description", d.get("text", "")))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            self.errors.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        elif method == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])
        elif method == "Page.loadEventFired":
            self.loads += 1

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        with self._cond:
            self._next += 1
            ident = self._next
            self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
            if not self._cond.wait_for(lambda: ident in self._replies, timeout=30):
                raise TimeoutError(f"no reply to {method}")
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def goto(self, url: str, timeout: float = 30) -> None:
        loads = self.loads
        self.send("Page.navigate", url=url)
        with self._cond:
            if not self._cond.wait_for(lambda: self.loads > loads, timeout=timeout):
                raise TimeoutError(f"{url} did not load in {timeout} s")

    def eval(self, expression: str) -> Any:
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression: str, timeout: float = 30, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout} s waiting for {what or expression}; errors: {self.errors}")

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png",
                                                    captureBeyondViewport=True)["data"]))
        return path

    def close(self) -> None:
        self.ws.close()


class Browser:
    def __init__(self, binary: str, *extra: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="synergy-chromium-")
        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={self.profile}", *extra, "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._port()
        self.http = f"http://127.0.0.1:{port}"

    def _port(self) -> int:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                threading.Thread(target=self._drain, daemon=True).start()
                return int(m.group(1))
        self.close()
        raise RuntimeError("chromium did not start:\n" + "".join(seen[-20:]))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for _ in self.proc.stderr:
            pass

    def page(self) -> Page:
        req = urllib.request.Request(self.http + "/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(req, timeout=10) as r:
            return Page(json.load(r)["webSocketDebuggerUrl"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)


def artifacts_dir(default: Path) -> Path:
    """Where screenshots go: $SYNERGY_TEST_ARTIFACTS if set, else `default` (the test's tmp)."""
    return Path(os.environ.get("SYNERGY_TEST_ARTIFACTS") or default)
