"""The explore server without a browser: every endpoint, its validation, the size cap, concurrency, and that
the numbers it serves are the lab's."""

from __future__ import annotations

import math
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import pytest

from posenc.explore import params, views
from posenc.explore.params import parse_view
from posenc.explore.server import ExploreServer, make_server
from posenc.lab.core import LabConfig
from posenc.lab.experiments import EXPERIMENTS
from posenc.positions import names

from .conftest import get


def api(server, path: str, **query) -> tuple[int, dict]:
    return get(server, f"{path}?{urlencode(query)}")


def test_page_static_files_and_registry(server):
    status, page = get(server, "/")
    assert status == 200 and b"/static/app.js" in page and b"plotly-cartesian.min.js" in page
    for name in ("app.js", "texts.js", "style.css", "plotly-cartesian.min.js", "plotly-LICENSE.txt"):
        status, body = get(server, f"/static/{name}")
        assert status == 200 and len(body) > 100, name
    status, reg = get(server, "/api/schemes")
    assert status == 200 and [s["name"] for s in reg["schemes"]] == names()
    assert reg["limits"]["max_dim"] >= 512 and reg["limits"]["max_length"] >= 2048


@pytest.mark.parametrize("path", ["/static/../server.py", "/static/..%2fserver.py", "/static/nothing.js",
                                  "/api/nothing", "/etc/passwd"])
def test_unknown_paths_are_404(server, path):
    status, body = get(server, path)
    assert status == 404 and body["error"]["field"] == "path"


def test_only_localhost_names_reach_a_loopback_server(server):
    status, body = get(server, "/api/schemes", headers={"Host": "attacker.example:80"})
    assert status == 403 and body["error"]["field"] == "host"
    assert get(server, "/api/schemes", headers={"Host": f"localhost:{server.server_address[1]}"})[0] == 200


@pytest.mark.parametrize("path", ["/api/view", "/api/properties"])
@pytest.mark.parametrize("query,field", [
    ({"dim": "63"}, "dim"), ({"length": "99999"}, "length"), ({"base": "nan"}, "base"), ({"scheme": "x"}, "scheme"),
    ({"start": "-3"}, "start"), ({"window": "0"}, "window"), ({"head": "9"}, "head"), ({"seed": "1.5"}, "seed"),
    ({"scale": "inf"}, "scale"), ({"what": "1"}, "what"), ({"scheme": "rope", "opt.pairing": "x"}, "opt.pairing"),
    ({"scheme": "rope", "opt.rotary_dim": "3"}, "options"),  # the scheme's own check, passed on
])
def test_every_endpoint_validates_every_parameter(server, path, query, field):
    status, body = api(server, path, **query)
    assert status == 400 and body["error"]["field"] == field
    assert body["error"]["en"] and body["error"]["ko"] and body["error"]["en"] != body["error"]["ko"]


def test_repeated_and_oversized_queries_are_refused(server):
    status, body = get(server, "/api/view?dim=8&dim=16")
    assert status == 400 and body["error"]["field"] == "dim"
    status, body = get(server, "/api/view?scale=" + "1" * 9000)
    assert status == 414


def test_the_size_cap_refuses_before_computing(server):
    start = time.perf_counter()
    status, body = api(server, "/api/properties", scheme="sinusoidal", dim=1024, length=4096)
    assert status == 400 and body["error"]["field"] == "length" and "limit of 1 s" in body["error"]["en"]
    assert "L = 4096" in body["error"]["en"] and "posenc lab properties --dim 1024 --length 4096" in body["error"]["en"]
    assert time.perf_counter() - start < 30  # refused, not computed (the row would take minutes)


def _largest(endpoint, **query):
    req = parse_view({k: str(v) for k, v in query.items()})
    scheme = views.build_scheme(req)
    return params.largest_length(lambda n: views.request_seconds(req, endpoint, scheme, n))


@pytest.mark.parametrize(("scheme", "dim"), [("t5", 64), ("alibi", 66), ("sinusoidal", 256), ("rope", 64)])
def test_property_row_just_under_the_cap_is_served_just_over_refused(server, monkeypatch, scheme, dim):
    monkeypatch.setattr(params, "REQUEST_SECONDS", 0.05)  # the same rule at a cap cheap enough for a test
    views._cache.clear()
    top = _largest("properties", scheme=scheme, dim=dim)
    assert 8 <= top < params.MAX_LENGTH
    status, body = api(server, "/api/properties", scheme=scheme, dim=dim, length=top)
    assert status == 200 and body["row"]["length"] == top, body
    status, body = api(server, "/api/properties", scheme=scheme, dim=dim, length=top + 1)
    assert status == 400 and body["error"]["field"] == "length", body
    en, ko = body["error"]["en"], body["error"]["ko"]
    assert f"L = {top + 1}" in en and "limit of 0.05 s" in en and f"at most {top:,}" in en
    assert f"L = {top + 1}" in ko and "0.05초" in ko and f"{top:,} 이하" in ko


def test_view_just_under_the_cap_is_served_just_over_refused(server):
    # FIRE's wide MLP runs on the profile's sampled rows × L: the view's cost grows with L
    query = {"scheme": "fire", "dim": 64, "opt.mlp_width": params.MAX_MLP_WIDTH}
    top = _largest("view", **query)
    assert 8 <= top < params.MAX_LENGTH
    status, body = api(server, "/api/view", **query, length=top, window=8)
    assert status == 200 and body["length"] == top, body
    status, body = api(server, "/api/view", **query, length=top + 1, window=8)
    assert status == 400 and body["error"]["field"] == "length"
    assert f"L = {top + 1}" in body["error"]["en"] and f"at most {top:,}" in body["error"]["en"]
    # every scheme's plots at the largest sizes are within the cap (their measured worst case)
    for name in names():
        req = parse_view({"scheme": name, "dim": str(params.MAX_DIM), "length": str(params.MAX_LENGTH)})
        views.check_request(req, "view")


def test_an_option_over_its_table_cap_is_refused_by_name(server):
    top = params.largest_options("learned", 64)["max_len"]
    status, body = api(server, "/api/view", scheme="learned", dim=64, length=16, window=8, **{"opt.max_len": top + 1})
    assert status == 400 and body["error"]["field"] == "opt.max_len"
    assert str(top + 1) in body["error"]["en"] and f"{params.MAX_TABLE_ENTRIES:,}" in body["error"]["en"]
    status, body = api(server, "/api/view", scheme="learned", dim=64, length=16, window=8, **{"opt.max_len": top})
    assert status == 200, body


def test_an_ipv6_server_leaves_later_ipv4_servers_alone():
    try:
        six = make_server("::1", 0)
    except OSError as err:
        pytest.skip(f"no IPv6 loopback here: {err}")
    try:
        assert six.address_family == socket.AF_INET6 and six.url.startswith("http://[::1]:")
        four = make_server("127.0.0.1", 0)
        try:
            assert four.address_family == socket.AF_INET and ExploreServer.address_family == socket.AF_INET
            assert four.url.startswith("http://127.0.0.1:")
        finally:
            four.server_close()
    finally:
        six.server_close()


def test_a_failing_request_answers_500_and_the_server_goes_on(server, monkeypatch):
    def broken(req):
        raise RuntimeError("boom")

    monkeypatch.setattr(views, "view", broken)
    status, body = api(server, "/api/view", dim=16, length=16)
    assert status == 500 and "RuntimeError" in body["error"]["en"]
    assert "boom" not in body["error"]["en"]  # a message can hold this machine's paths: never sent to a page
    monkeypatch.undo()
    assert api(server, "/api/view", dim=16, length=16)[0] == 200


def test_view_numbers_are_the_labs(server):
    cfg = LabConfig(dim=32, length=96, base=5000.0, seed=3)
    status, v = api(server, "/api/view", scheme="sinusoidal", dim=32, length=96, base=5000, seed=3, window=16)
    assert status == 200 and v["family"] == "additive" and v["table"]["kind"] == "table"
    # attention example: token 0's row with and without the sinusoid = the lab's position-vs-content example
    lab = EXPERIMENTS["position-vs-content"].run(cfg).values
    assert v["attention"]["row0_with"] == pytest.approx(lab["example_with"], abs=1e-12)
    assert v["attention"]["row0_without"] == pytest.approx(lab["example_without"], abs=1e-12)
    # profile: the lab's not-monotonic profile and its rises
    mono = EXPERIMENTS["not-monotonic"].run(cfg).values
    assert v["profile"]["increases"] == mono["increases"] and v["profile"]["argmin"] == mono["argmin"]
    assert v["profile"]["mean"][:8] == pytest.approx(mono["profile_head"], abs=1e-10)
    omegas = [5000.0 ** (-2 * i / 32) for i in range(16)]  # independent float64 formula: Σ cos(δ·ω)
    for lag in (0, 1, 7, 95):
        assert v["profile"]["mean"][lag] == pytest.approx(sum(math.cos(lag * w) for w in omegas), abs=1e-9)
    # naive window: the lab's naive-position experiment
    naive = EXPERIMENTS["naive-position"].run(cfg).values["windows"][0]
    assert v["naive"]["windows"][0] == pytest.approx(naive)
    # heat maps: the table itself, to the rounding the page is sent with
    t = v["table"]
    z = [[x * t["unit"] for x in row] for row in t["z"]]
    p, c = t["rows"][3], t["cols"][5]
    want = math.sin(p * omegas[c // 2]) if c % 2 == 0 else math.cos(p * omegas[c // 2])
    assert z[3][5] == pytest.approx(want, abs=t["unit"])


def test_properties_are_the_lab_property_row(server):
    from posenc.lab.experiments import property_table

    cfg = LabConfig(dim=16, length=40, base=700.0, seed=5)
    rows = {r["name"]: r for r in property_table(cfg)}
    for name in ("sinusoidal", "rope", "alibi", "learned"):
        status, body = api(server, "/api/properties", scheme=name, dim=16, length=40, base=700, seed=5)
        assert status == 200, body
        assert body["row"] == pytest.approx(rows[name]), name


def test_every_scheme_answers_or_says_why(server):
    for name in names():
        status, body = api(server, "/api/view", scheme=name, dim=16, length=24, window=8)
        assert status == 200, (name, body)
        assert body["family"] in ("additive", "rotary", "bias", "none")


def test_a_learned_table_says_where_it_ends(server):
    status, v = api(server, "/api/view", scheme="learned", dim=16, length=24, start=5000, window=8, **{"opt.max_len": 64})
    assert status == 200 and "error" in v["similarity"] and v["usable_length"] == 24


def test_concurrent_requests_give_the_sequential_answers(server):
    settings = [dict(scheme=s, dim=d, length=48, seed=d) for s in ("learned", "rope", "t5", "sinusoidal")
                for d in (16, 24)]
    alone = [api(server, "/api/view", **q)[1] for q in settings]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda q: api(server, "/api/view", **q)[1], settings * 2))
    for n, body in enumerate(together):
        want = alone[n % len(settings)]
        for key in ("table", "profile", "similarity", "attention"):
            assert body[key] == want[key], (settings[n % len(settings)], key)


def _ctrl_c_as_in_a_terminal():
    # A job started with `&` by a non-interactive shell inherits SIGINT as ignored, and so would the
    # server: give it the disposition a terminal gives, so the test does not depend on how pytest was run.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_command_prints_the_url_and_stops_on_ctrl_c():
    proc = subprocess.Popen([sys.executable, "-m", "posenc.cli", "explore", "--port", "0", "--no-browser", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    try:
        line = proc.stdout.readline()
        assert line.startswith("posenc explore: http://127.0.0.1:"), line
        url = line.split()[2]
        import urllib.request

        with urllib.request.urlopen(url + "api/schemes", timeout=60) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()


def test_command_refuses_a_bad_port_and_warns_off_loopback():
    bad = subprocess.run([sys.executable, "-m", "posenc.cli", "explore", "--port", "70000", "--no-browser"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--port" in bad.stderr and "Traceback" not in bad.stderr
    proc = subprocess.Popen([sys.executable, "-m", "posenc.cli", "explore", "--host", "0.0.0.0", "--port", "0",
                             "--no-browser", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    try:
        assert proc.stdout.readline().startswith("posenc explore: http://")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        assert "warning: listening on 0.0.0.0" in proc.stderr.read()
    finally:
        proc.kill()


def test_bias_profile_is_the_labs_forward_profile_for_a_distance_only_bias(server):
    from posenc.lab import measures
    from posenc.lab.experiments import lab_scheme
    from posenc.positions import default_positions

    status, v = api(server, "/api/view", scheme="alibi", dim=16, length=80, head=2)
    assert status == 200 and v["profile"]["method"].startswith("mean over")
    scheme = lab_scheme("alibi", LabConfig(dim=16, length=80))
    sim = scheme.similarity(default_positions(80), default_positions(80))  # (H, L, L)
    want = measures.forward_profile(sim)[2]  # every diagonal, exactly: ALiBi depends on j − i only
    assert v["profile"]["mean"] == pytest.approx(want.tolist(), abs=1e-12)
    assert v["profile"]["increases"] == measures.monotonicity(want)["increases"]


def _raw(server, request: bytes) -> bytes:
    with socket.create_connection(server.server_address[:2], timeout=30) as conn:
        conn.sendall(request)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("hosts", [["evil@localhost"], ["localhost", "attacker.example"],
                                   ["attacker.example", "localhost"], [], ["localhost evil"], ["localhost:99999x"]])
def test_user_info_duplicate_or_malformed_host_headers_do_not_pass_the_loopback_check(server, hosts):
    lines = "".join(f"Host: {h}\r\n" for h in hosts)
    answer = _raw(server, f"GET /api/schemes HTTP/1.1\r\n{lines}Connection: close\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.0 403") or answer.startswith(b"HTTP/1.1 403"), answer[:200]


def test_a_5000_character_file_name_is_a_404_that_names_no_path(server):
    import posenc.explore

    status, body = get(server, "/static/" + "a" * 5000 + ".js")
    assert status == 404 and body["error"]["field"] == "path"
    assert posenc.explore.__file__.rsplit("/", 2)[0] not in str(body)
