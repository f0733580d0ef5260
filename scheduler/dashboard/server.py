"""The dashboard's HTTP server: static pages, plotly.js and JSON views, behind user tokens.

Read-only (GET only). It runs in the daemon shell, beside /metrics, on the standard library's
threaded HTTP server: the pages poll the JSON endpoints every few seconds, which needs nothing
more. The scheduling core never sees it.

Authentication: a user token (`synergy admin users add`; STATE_DIR/admin.token is the
built-in admin's), checked like synergyd's gRPC calls (users.UserBook.by_token: hashed,
constant time, a revoked token refused at once). A browser opens
`http://HOST:PORT/?token=TOKEN` once; the server answers with an HttpOnly cookie and a
redirect to the same page without the token, and every later request presents the cookie.
Scripts may send `Authorization: Bearer TOKEN` instead. An admin sees every job; a plain
user sees their own jobs, and other users' jobs on the node view only as ids.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlencode, urlsplit

from synergy.scheduler.daemon.events import Parts, PeriodicEvent
from synergy.scheduler.daemon.users import ADMIN, UserBook
from synergy.scheduler.daemon.logs import LOGGER, event
from synergy.scheduler.daemon.server import BindError
from synergy.scheduler.dashboard import views
from synergy.scheduler.dashboard.assets import plotly_js, static_text
from synergy.scheduler.dashboard.history import History

COOKIE = "synergy_dashboard"
#: How often the history is sampled: every round, at least every 5 s (the pages poll at 2 s).
SAMPLE_EVERY_S = 5.0
_STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css", "charts.js": "text/javascript"}
_PAGES = {"/": "index.html", "/jobs": "index.html"}
_JOB_PAGE = re.compile(r"^/jobs/(\d+)$")
_JOB_API = re.compile(r"^/api/jobs/(\d+)$")


class SampleEvent(PeriodicEvent):
    """Adds a cluster sample to the dashboard's history (events.EventLoop runs it)."""

    name = "dashboard-sample"

    def __init__(self, parts: Parts, history: History) -> None:
        super().__init__(parts)
        self.history = history

    @property
    def interval_s(self) -> float:
        return min(SAMPLE_EVERY_S, self.ctx.config.round_s)

    def run(self) -> None:
        views.sample(self.parts, self.history)


class DashboardServer:
    """`port=0` picks a free port (see `.port`)."""

    def __init__(self, parts: Parts, history: History, host: str, port: int, users: UserBook) -> None:
        log = logging.getLogger(LOGGER)
        assets: dict[str, tuple[bytes, str]] = {}
        assets_lock = threading.Lock()

        def asset(name: str) -> tuple[bytes, str]:
            with assets_lock:  # read once, on first use (plotly.min.js is 4.6 MB)
                if name not in assets:
                    if name == "plotly.min.js":
                        assets[name] = (plotly_js().encode(), "text/javascript")
                    else:
                        assets[name] = (static_text(name).encode(), _STATIC.get(name, "text/html"))
                return assets[name]

        #: Each view with who asks: None = an admin (everything), else the user's name.
        routes: dict[str, Callable[[dict[str, list[str]], str | None], Any]] = {
            "/api/cluster": lambda q, who: views.cluster(parts, who),
            "/api/jobs": lambda q, who: views.jobs(parts, who),
            "/api/history": lambda q, who: views.history(parts, history, _window(q)),
        }

        def viewer(token: str) -> str | None | bool:
            """None: an admin; a name: that plain user; False: no valid token."""
            user = users.by_token(token) if token else None
            if user is None:
                return False
            return None if user.role == ADMIN else user.name

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                path = url.path.rstrip("/") or "/"
                if "token" in query and viewer(query["token"][0]) is not False:
                    token = query["token"][0]
                    rest = {k: v for k, v in query.items() if k != "token"}
                    self.send_response(303)
                    self.send_header("Set-Cookie", f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/")
                    self.send_header("Location", path + ("?" + urlencode(rest, doseq=True) if rest else ""))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                who = self._viewer()
                if who is False:
                    body = static_text("login.html").encode()
                    return self._reply(401, body, "text/html")
                try:
                    self._route(path, query, who)
                except Exception:  # noqa: BLE001 (one failed view is a 500, never a dead daemon)
                    event(log, "dashboard.failed", logging.ERROR, exc_info=True, path=path)
                    self._reply(500, b'{"error": "internal error; see the daemon log"}', "application/json")

            def _route(self, path: str, query: dict[str, list[str]], who: str | None) -> None:
                if path in _PAGES or _JOB_PAGE.match(path):
                    body, ctype = asset("job.html" if _JOB_PAGE.match(path) else _PAGES[path])
                    return self._reply(200, body, ctype)
                if path.startswith("/static/"):
                    name = path.removeprefix("/static/")
                    if name != "plotly.min.js" and name not in _STATIC:
                        return self._json(404, {"error": f"no asset {name!r}"})
                    body, ctype = asset(name)
                    return self._reply(200, body, ctype, cache=True)
                if path in routes:
                    return self._json(200, routes[path](query, who))
                m = _JOB_API.match(path)
                if m:
                    found = views.job(parts, history, int(m.group(1)))
                    if found is None:
                        return self._json(404, {"error": f"no job {m.group(1)}"})
                    if who is not None and found["user"] != who:
                        return self._json(403, {"error": f"job {m.group(1)} belongs to another user"})
                    return self._json(200, found)
                self._json(404, {"error": f"not found: {path}; try / or /api/cluster"})

            def _viewer(self) -> str | None | bool:
                """Who presents the bearer header or the cookie (see `viewer`)."""
                header = self.headers.get("Authorization", "")
                if header.startswith("Bearer "):
                    return viewer(header[7:].strip())
                for part in self.headers.get("Cookie", "").split(";"):
                    name, _, value = part.strip().partition("=")
                    if name == COOKIE:
                        return viewer(value)
                return False

            def _json(self, code: int, doc: Any) -> None:
                self._reply(code, json.dumps(doc).encode(), "application/json")

            def _reply(self, code: int, body: bytes, ctype: str, cache: bool = False) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype + ("; charset=utf-8" if ctype.startswith("text/") else ""))
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # page polls are not news
                pass

        try:
            self._httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise BindError(f"--dashboard-port: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        if not ipaddress.ip_address(self._httpd.server_address[0]).is_loopback:
            event(log, "dashboard.exposed", logging.WARNING, host=host, port=self.port,
                  advice="plain HTTP beyond this machine: user tokens cross the network in the clear; "
                         "prefer the loopback default and an SSH tunnel (docs/dashboard.md)")
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="dashboard-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _window(query: dict[str, list[str]]) -> float:
    """`?window=SECONDS` (0 or absent: everything kept); a bad value is the whole history."""
    try:
        value = float(query.get("window", ["0"])[0])
    except ValueError:
        return 0.0
    return value if value > 0 else 0.0
