"""Headless Chromium (Debian's `chromium` package) driven over the Chrome DevTools protocol
with aiohttp's websocket client: no Selenium, no Playwright, no browser download."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from streams.broker import stop_session

INSTALL_HINT = (
    "the browser tests need Debian's `chromium` package: run `make browser` "
    "(apt-get install -y chromium, as root)"
)


def chromium_binary() -> str:
    binary = shutil.which("chromium")
    if binary is None:
        raise AssertionError(f"no `chromium` on PATH; {INSTALL_HINT}")
    return binary


class Browser:
    """One headless Chromium with one page; `evaluate` runs JavaScript in it."""

    def __init__(self, profile: Path, width: int = 1100, height: int = 900) -> None:
        self.profile = profile
        self.size = (width, height)
        self.loop = asyncio.new_event_loop()
        self.process: subprocess.Popen[bytes] | None = None
        self.session: aiohttp.ClientSession | None = None
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.ids = itertools.count(1)

    def start(self, timeout_s: float = 30.0) -> Browser:
        self.profile.mkdir(parents=True, exist_ok=True)
        port_file = self.profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        with (self.profile / "chromium.log").open("wb") as log:
            self.process = subprocess.Popen(
                [
                    chromium_binary(),
                    "--headless",
                    "--no-sandbox",  # tests run as root in containers, where the sandbox cannot
                    "--disable-gpu",
                    "--no-first-run",
                    "--remote-debugging-port=0",
                    f"--user-data-dir={self.profile}",
                    f"--window-size={self.size[0]},{self.size[1]}",
                    "about:blank",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while not port_file.exists() or not port_file.read_text().strip():
            if self.process.poll() is not None or time.monotonic() > deadline:
                output = (self.profile / "chromium.log").read_text(errors="replace")
                raise AssertionError(f"chromium did not open its DevTools port:\n{output[-3000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self.loop.run_until_complete(self._connect(port))
        return self

    async def _connect(self, port: int) -> None:
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json(content_type=None)
        page = next(t for t in targets if t["type"] == "page")
        self.socket = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.loop.run_until_complete(self._call(method, params))

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.socket is not None
        call_id = next(self.ids)
        await self.socket.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads((await self.socket.receive()).data)
            if message.get("id") == call_id:  # events in between are not asked for here
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return dict(message["result"])

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float) -> Any:
        """Evaluate until the value is truthy; fail with the page's text if it never is."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        text = self.evaluate("document.body ? document.body.innerText : ''")
        raise AssertionError(f"page never satisfied {expression} in {timeout_s}s:\n{text[:3000]}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        if self.socket is not None:
            self.loop.run_until_complete(self.socket.close())
        if self.session is not None:
            self.loop.run_until_complete(self.session.close())
        if self.process is not None:
            stop_session(self.process, timeout_s=10)
        self.loop.close()

    def __enter__(self) -> Browser:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
