"""The explore server: the standard library's ``ThreadingHTTPServer`` serving one page and a JSON API.

Why the standard library and not a web framework: the page needs four GET
endpoints and static files, nothing a framework adds (routing tables, templates,
sessions) is used, and posenc then needs no new dependency — it runs wherever
``pip install posenc`` ran, offline. ``ThreadingHTTPServer`` answers each request
in its own thread, so one slow request never blocks the page.

Endpoints (all GET; every parameter validated by ``posenc.explore.params``):

==========================  =========================================================================
``/``                       the page (``static/index.html``)
``/static/NAME``            the page's script, style, texts and the charting library (plotly.js)
``/api/schemes``            the registry: each scheme's family and options, the limits, the defaults
``/api/view?...``           the plots' data (``views.view``)
``/api/properties?...``     the scheme's property row (``views.properties``), cached
==========================  =========================================================================

A bad parameter answers 400 with ``{"error": {"field", "en", "ko"}}``; a scheme
that refuses its options answers 400 with the scheme's own message; anything
else answers 500 with the error's message — the server keeps serving.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import socket
import sys
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from posenc.explore import params, views
from posenc.positions import lookup, names, options

#: Longest query string accepted (a scheme's options fit in a few hundred bytes).
MAX_QUERY = 8192
#: Seconds a connection may stay silent before the server drops it.
SOCKET_TIMEOUT = 30

_STATIC_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
#: A Host header: a name or address and an optional port — no user info (``evil@localhost``), no spaces.
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".png": "image/png", ".txt": "text/plain; charset=utf-8"}


def host_of(values: list[str]) -> str:
    """The host named by a request's Host header(s), or "" unless there is exactly one well-formed header."""
    if len(values) != 1:
        return ""
    match = _HOST.match(values[0].strip())
    return match.group(1) if match else ""


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _finite(obj: Any) -> Any:
    """The same structure with every non-finite float replaced by None (browsers' JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def to_json(obj: Any) -> bytes:
    try:
        text = json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except ValueError:  # a NaN or inf somewhere: strict JSON says null
        text = json.dumps(_finite(obj), allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return text.encode()


def schemes_payload() -> dict[str, Any]:
    """What the page needs to draw its controls: the whole registry, the limits and the lab's defaults."""
    return {
        "schemes": [{"name": n, "family": lookup(n).family, "options": options(n)} for n in names()],
        "limits": {"max_dim": params.MAX_DIM, "max_length": params.MAX_LENGTH, "max_window": params.MAX_WINDOW,
                   "max_start": params.MAX_START, "max_table_entries": params.MAX_TABLE_ENTRIES,
                   "max_mlp_width": params.MAX_MLP_WIDTH, "request_seconds": params.REQUEST_SECONDS},
        "defaults": {"scheme": "sinusoidal", "dim": 64, "length": 512, "base": 10000.0, "seed": 0, "start": 0,
                     "window": 64, "head": 0},
    }


class ExploreHandler(BaseHTTPRequestHandler):
    """One request. Every answer is complete JSON or a static file; nothing a request does outlives it."""

    server_version = "posenc-explore"
    timeout = SOCKET_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        if not getattr(self.server, "quiet", True):
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                                    "img-src 'self' data:; frame-ancestors 'none'")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, to_json(obj), "application/json; charset=utf-8")

    def _error(self, status: int, field: str, en: str, ko: str) -> None:
        self._json(status, {"error": {"field": field, "en": en, "ko": ko}})

    def do_HEAD(self) -> None:  # noqa: N802 - the stdlib's name
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):  # the page moved on; nothing to answer
            pass
        except Exception as err:  # noqa: BLE001 - one bad request must never take the server down
            if not getattr(self.server, "quiet", True):
                traceback.print_exc(file=sys.stderr)
            try:
                # the type only: a message can hold paths of this machine, which a page must not see
                self._error(500, "server", f"internal error ({type(err).__name__})",
                            f"서버 내부 오류 ({type(err).__name__})")
            except OSError:
                pass

    def _route(self) -> None:
        if self.server.loopback_only and not is_loopback(host_of(self.headers.get_all("Host") or [])):
            # a page elsewhere pointing a name at 127.0.0.1 (DNS rebinding) must not reach the API
            self._error(403, "host", "this server answers only to localhost", "이 서버는 localhost 요청에만 응답합니다")
            return
        url = urlsplit(self.path)
        if len(url.query) > MAX_QUERY:
            self._error(414, "query", f"query longer than {MAX_QUERY} characters", f"질의 문자열이 {MAX_QUERY}자를 넘습니다")
            return
        if url.path in ("/", "/index.html"):
            self._static("index.html")
        elif url.path.startswith("/static/"):
            self._static(url.path[len("/static/"):])
        elif url.path == "/api/schemes":
            self._json(200, schemes_payload())
        elif url.path in ("/api/view", "/api/properties"):
            self._api(url.path, url.query)
        else:
            self._error(404, "path", f"no such page: {url.path}", f"없는 주소입니다: {url.path}")

    def _static(self, name: str) -> None:
        file = resources.files("posenc.explore").joinpath("static", name)
        try:
            found = bool(_STATIC_NAME.match(name)) and file.is_file()
        except OSError:  # ENAMETOOLONG and the like: no such file either
            found = False
        if not found:
            self._error(404, "path", f"no such file: {name}", f"없는 파일입니다: {name}")
            return
        suffix = name[name.rfind("."):]
        self._send(200, file.read_bytes(), _TYPES.get(suffix, "application/octet-stream"))

    def _api(self, path: str, query: str) -> None:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False, max_num_fields=64)
        keys = [k for k, _ in pairs]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        try:
            if repeated:
                raise params.ParamError(repeated[0], "given more than once; give it once",
                                        "두 번 이상 주어졌습니다. 한 번만 주세요")
            req = params.parse_view(dict(pairs))
            result = views.view(req) if path == "/api/view" else views.properties(req)
        except params.ParamError as err:
            self._json(400, {"error": err.to_json()})
            return
        except (ValueError, TypeError) as err:  # the scheme refused its options: its own message says why
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            self._error(400, "options", message, f"이 설정으로는 방식을 만들 수 없습니다: {message}")
            return
        self._json(200, result)


class ExploreServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that knows whether it listens on loopback only."""

    daemon_threads = True  # Ctrl-C never waits for a slow request
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], *, quiet: bool = True) -> None:
        # per instance: setting it on the class would make every later server in the process IPv6
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, ExploreHandler)
        self.quiet = quiet
        self.loopback_only = is_loopback(address[0])

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        shown = f"[{shown}]" if ":" in shown else shown
        return f"http://{shown}:{port}/"


def make_server(host: str = "127.0.0.1", port: int = 8765, *, quiet: bool = True) -> ExploreServer:
    """A server bound to ``host:port`` (port 0: any free port), not yet serving."""
    return ExploreServer((host, port), quiet=quiet)
