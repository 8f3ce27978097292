"""A live explore server on a free loopback port, shared by the module's tests."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from posenc.explore.server import ExploreServer, make_server


@pytest.fixture(scope="module")
def server() -> Iterator[ExploreServer]:
    srv = make_server("127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def get(server: ExploreServer, path: str, *, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, parsed JSON or raw bytes) of a GET to the server."""
    request = urllib.request.Request(server.url.rstrip("/") + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, body, kind = response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        status, body, kind = err.code, err.read(), err.headers.get("Content-Type", "")
    return status, json.loads(body) if kind.startswith("application/json") else body
