"""``posenc rope --engines llama.cpp``'s logits row: llama.cpp's next-token distributions against posenc's under
each reading of a GGUF file's positions.

Without a llama.cpp build (CI): llama-perplexity's logits file is written the way ``tools/perplexity`` writes it
(an independent encoder here) and read back within its 16-bit step; the wrong readings of a model's plan are
the ones named; and a shim in place of ``llama-perplexity`` — a program that scores the text with posenc under a
chosen reading and writes llama.cpp's file — is judged: the right reading agrees, each wrong one is named by its
bug class (a bug zoo at the level of the whole model). With a build: the real SmolLM2 file agrees, every wrong
reading farther than the tolerance.
"""

from __future__ import annotations

import math
import stat
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.ropecheck import engines, llamacpp, llamacpp_logits

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pretrained"))


def encode_rows(logits: np.ndarray) -> bytes:
    """llama-perplexity's ``log_softmax`` with a base file: per row float32 scale and minimum log-probability, then
    one uint16 per token (``tools/perplexity/perplexity.cpp``), the rows of one chunk."""
    out = bytearray()
    n_vocab = logits.shape[1]
    nv = 2 * ((n_vocab + 1) // 2) + 4
    for row in logits.astype(np.float32):
        mx, mn = float(row.max()), float(row.min())
        mn = max(mn, mx - 16)
        lse = math.log(float(np.exp(row.astype(np.float64) - mx).sum()))
        scale = np.float32((mx - mn) / 65535.0)
        q = np.where(row > mn, np.floor((row - mn) / scale + 0.5), 0).astype(np.uint16)
        words = np.zeros(nv, dtype=np.uint16)
        words[:4] = np.frombuffer(struct.pack("<ff", scale, np.float32(mn - mx - lse)), dtype=np.uint16)
        words[4 : 4 + n_vocab] = q
        out += words.tobytes()
    return bytes(out)


def logits_file(path: Path, tokens: np.ndarray, logits: np.ndarray, n_vocab: int) -> None:
    """A ``--kl-divergence-base`` file of one chunk: ``logits`` (N/2 − 1, V) at positions N/2 … N − 2."""
    n_ctx = len(tokens)
    head = b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, 1) + tokens.astype("<i4").tobytes()
    path.write_bytes(head + encode_rows(logits))


def test_the_logits_file_is_read_within_its_16_bit_step(tmp_path, seed):
    gen = np.random.default_rng(seed)
    n_ctx, vocab = int(gen.integers(8, 40)) * 2, int(gen.integers(20, 300))
    rows = n_ctx - 1 - n_ctx // 2
    logits = gen.standard_normal((rows, vocab)) * float(gen.uniform(1, 8))
    tokens = gen.integers(0, vocab, n_ctx)
    logits_file(tmp_path / "l.bin", tokens, logits, vocab)
    got = llamacpp_logits.read_logprobs(tmp_path / "l.bin")
    assert got["n_ctx"] == n_ctx and got["n_vocab"] == vocab and got["tokens"].tolist() == tokens.tolist()
    ref = torch.log_softmax(torch.tensor(logits, dtype=torch.float64), -1)
    floor = ref.max(-1, keepdim=True).values - 16
    step = (ref.max(-1).values - ref.min(-1).values.clamp(min=floor[:, 0])) / 65535
    above = ref > floor + 1e-3
    err = (got["logprobs"] - ref).abs()
    assert bool((err[above] <= (step[:, None].expand_as(err)[above] * 0.5 + 1e-5)).all()), float(err[above].max())


def test_a_file_that_is_not_llamacpps_is_refused(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"GGUF" + bytes(40))
    with pytest.raises(llamacpp_logits.Unavailable, match="not a llama-perplexity logits file"):
        llamacpp_logits.read_logprobs(tmp_path / "x.bin")


def test_distance_is_llamacpps_kl_and_zero_on_itself(seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.log_softmax(torch.randn(5, 50, generator=gen, dtype=torch.float64) * 3, -1)
    b = torch.log_softmax(torch.randn(5, 50, generator=gen, dtype=torch.float64) * 3, -1)
    t = torch.randint(0, 50, (5,), generator=gen)
    same = llamacpp_logits.distance(a, a, t)
    assert float(same["kl"].abs().max()) == 0 and same["top1"] == 1.0
    d = llamacpp_logits.distance(a, b, t)
    ref = [sum(math.exp(float(a[r, i])) * float(a[r, i] - b[r, i]) for i in range(50) if float(a[r, i]) > -16)
           for r in range(5)]
    assert torch.allclose(d["kl"], torch.tensor(ref, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    assert torch.allclose(d["dloss"], (a[range(5), t] - b[range(5), t]).abs())


def _decoder(plan):
    from posenc.models.decoder import DecoderConfig, build_decoder

    return build_decoder(DecoderConfig(vocab_size=32, dim=32, num_layers=len(plan), num_heads=2, ffn_dim=32,
                                       layer_plan=plan)).eval()


def test_the_wrong_readings_of_a_gemma3_like_plan():
    """Sliding layers plain at θ 10⁴, global layers linearly scaled at θ 10⁶: the scaling dropped from the global
    layers, spread to the sliding ones, θ at its default, the other pairing — each once, each a different model."""
    sliding = {"position": "rope", "position_options": {"base": 10000.0}, "window": {"kind": "sliding", "size": 4}}
    glob = {"position": "rope-linear", "position_options": {"base": 1e6, "factor": 8.0}}
    model = _decoder([sliding, sliding, glob])
    rs = llamacpp_logits.readings(model)
    assert [r.bug for r in rs] == [None, "scaling-on-wrong-layers", "scaling-on-wrong-layers", "theta-default",
                                   "pairing"]
    none_scaled, all_scaled = rs[1].plan, rs[2].plan
    assert none_scaled[2]["position"] == "rope" and none_scaled[2]["position_options"]["base"] == 1e6
    assert [s["position"] for s in all_scaled] == ["rope-linear"] * 3
    assert all_scaled[0]["position_options"]["base"] == 10000.0 and all_scaled[0]["position_options"]["factor"] == 8
    assert all(s["position_options"]["base"] == 10000.0 for s in rs[3].plan)
    ids = torch.randint(0, 32, (1, 12))
    with torch.no_grad():
        outs = [llamacpp_logits.with_plan(model, r.plan)(ids) for r in rs]
    assert llamacpp_logits.with_plan(model, rs[0].plan) is model
    for i in range(1, len(outs)):
        assert not torch.allclose(outs[0], outs[i]), rs[i].bug  # each reading is another model


def test_yarn_readings_include_the_collapsed_attention_factor():
    plan = [{"position": "rope-yarn", "position_options": {"base": 10000.0, "factor": 4.0, "original_max_len": 64}}]
    rs = llamacpp_logits.readings(_decoder(plan * 2))
    assert [r.bug for r in rs] == [None, "scaling-dropped", "attention-factor-one", "pairing"]
    assert rs[2].plan[0]["position_options"]["attention_factor"] == 1.0


def test_the_verdict():
    def r(bug, kl):
        return {"bug_class": bug, "short": "", "reading": "", "mean_kl": kl, "mean_abs_dloss": kl,
                "max_abs_dloss": 3 * kl, "top1_agree": 1.0, "nll_posenc": 1.0, "nll_llama": 1.0,
                "_dloss": torch.tensor([0.0, 0.3, 0.0])}

    tol = llamacpp_logits.KL_AGREES
    assert llamacpp_logits.verdict([r(None, tol / 4), r("pairing", 3.0)], 8)["status"] == "agrees"
    wrong = llamacpp_logits.verdict([r(None, 0.3), r("theta-default", tol / 10), r("pairing", 3.0)], 8)
    assert wrong["status"] == "differs" and wrong["bug_class"] == "theta-default"
    assert wrong["first_diverging"] == {"pair": None, "position": 5}
    far = llamacpp_logits.verdict([r(None, 0.3), r("pairing", 3.0)], 8)
    assert far["status"] == "differs" and far["bug_class"] is None  # nearer to no known wrong reading
    # a wrong reading within the tolerance cannot be told apart: said so
    blind = llamacpp_logits.verdict([r(None, tol / 4), r("theta-default", tol / 2)], 8)
    assert blind["status"] == "agrees" and "not told apart here: theta-default" in blind["reason"]


# -- a shim llama-perplexity: posenc under a chosen reading, written as llama.cpp writes ----------------------------
SHIM = """#!{python}
import struct, sys
sys.path[:0] = {path!r}
import numpy as np, torch
from posenc.pretrained import load_pretrained
from posenc.ropecheck import llamacpp_logits as L
from test_llamacpp_logits import encode_rows
args = sys.argv[1:]
get = lambda flag: args[args.index(flag) + 1]
n = int(get("-c"))
pm = load_pretrained(get("-m"))
ids = pm.tokenizer.encode(open(get("-f"), encoding="utf-8").read())
if len(ids) < 2 * n:
    sys.exit("you need at least %d tokens" % (2 * n))
ids = torch.tensor(ids[:n])
bug = {bug!r}
reading = next(r for r in L.readings(pm.model) if r.bug == bug and r.short == {short!r})
lp = L.posenc_logprobs(L.with_plan(pm.model, reading.plan), ids).numpy()
V = lp.shape[1]
with open(get("--kl-divergence-base"), "wb") as f:
    f.write(b"_logits_" + struct.pack("<iii", n, V, 1) + ids.numpy().astype("<i4").tobytes() + encode_rows(lp))
"""


@pytest.fixture(scope="module")
def yarn_gguf(tmp_path_factory):
    """A tiny Llama GGUF with YaRN keys, as llama.cpp's converter writes them (q/k and the head scaled up, so
    that every wrong reading moves the next-token distributions past the tolerance)."""
    from gguf_helpers import randomise, tiny_llama, tokenizer_fields, train_tokenizer, write_gguf

    if not Path("/usr/share/common-licenses/GPL-3").is_file():
        pytest.skip("the logits check scores Debian's licence texts: /usr/share/common-licenses is absent")
    torch.manual_seed(0)
    tok = train_tokenizer(320)
    model = randomise(tiny_llama(320, rope_theta=50000.0))
    with torch.no_grad():  # sharp attention and peaked outputs: positions move the distributions
        model.lm_head.weight.mul_(10)
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8)
            layer.self_attn.k_proj.weight.mul_(8)
    path = tmp_path_factory.mktemp("yarn") / "tiny-yarn.gguf"
    return write_gguf(path, model, tokenizer_fields(tok), meta={
        "llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
        "llama.rope.scaling.original_context_length": 64})


def _shim(tmp_path, bug, short=""):
    prog = tmp_path / f"llama-perplexity-{bug}-{short or 'x'}"
    here = str(Path(__file__).parent)
    prog.write_text(SHIM.format(python=sys.executable, path=[str(Path(engines.__file__).parents[2]), here],
                                bug=bug, short=short))
    prog.chmod(prog.stat().st_mode | stat.S_IEXEC)
    return prog


@pytest.mark.parametrize("bug", [None, "scaling-dropped", "attention-factor-one", "theta-default", "pairing"])
def test_the_shim_engine_is_judged_by_its_reading(tmp_path, yarn_gguf, bug):
    """llama.cpp in place: a program that reads the YaRN file the right way agrees; one that reads it a published
    wrong way is named by that way — and each wrong reading is farther than the tolerance from the right one."""
    row = llamacpp_logits.check(_shim(tmp_path, bug), yarn_gguf, tokens=64)
    readings = row["logits"]["readings"]
    assert [r["bug_class"] for r in readings] == [None, "scaling-dropped", "attention-factor-one", "theta-default",
                                                 "pairing"]
    if bug is None:
        assert row["status"] == "agrees", row["reason"]
        assert readings[0]["mean_kl"] < 1e-4  # only the 16-bit rounding of the file
        assert all(r["mean_kl"] > llamacpp_logits.KL_AGREES for r in readings[1:]), row["reason"]
    else:
        assert row["status"] == "differs" and row["bug_class"] == bug, row["reason"]


def test_the_engine_adds_the_logits_row_for_a_gguf(tmp_path, yarn_gguf, monkeypatch):
    """Through ``engines.compare``: the layer group is unsupported for YaRN (the attention factor is not printed),
    the logits row judges it; --logits-tokens 0 leaves the row out."""
    eng = engines.LlamaCppEngine()
    eng._build, eng._version = tmp_path, "shim"
    monkeypatch.setattr(eng, "available", lambda: None)
    monkeypatch.setattr(llamacpp, "perplexity_binary", lambda build: _shim(tmp_path, None))
    monkeypatch.setattr(engines, "engine", lambda name: eng)
    monkeypatch.setattr(eng, "run", lambda cases: [{"unsupported": "rope scaling yarn"}] * len(cases))
    case = engines.Case(layer_type="all", scheme="rope-yarn", options={}, head_dim=16, positions=[0, 1],
                        source=str(yarn_gguf))
    rows = engines.compare([case], ["llama.cpp"], logits_tokens=32)
    assert [(r["layer_type"], r["status"]) for r in rows] == [("all", "unsupported"), ("logits", "agrees")]
    assert engines.compare([case], ["llama.cpp"], logits_tokens=0)[1:] == []


def test_an_old_build_without_llama_perplexity_is_unavailable_with_the_fix(tmp_path):
    with pytest.raises(llamacpp.Unavailable, match="posenc engines install llama.cpp"):
        llamacpp.perplexity_binary(tmp_path)


def test_the_real_smollm2_file_agrees_with_llamacpp():
    """llama-perplexity itself on the real SmolLM2 GGUF: posenc's reading is nearest and within the tolerance;
    θ at its default and the other pairing are both farther than the tolerance."""
    from gguf_helpers import smollm2_path

    eng = engines.engine("llama.cpp")
    why = eng.available()
    if why:
        pytest.skip(f"llama.cpp: {why}")
    try:
        program = llamacpp.perplexity_binary(eng._build)
    except llamacpp.Unavailable as err:
        pytest.skip(str(err))
    row = llamacpp_logits.check(program, smollm2_path(), tokens=256)
    assert row["status"] == "agrees", row["reason"]
    assert all(r["mean_kl"] > llamacpp_logits.KL_AGREES for r in row["logits"]["readings"][1:]), row["reason"]


def test_logits_tokens_flag_refuses_too_few():
    from posenc.cli import main

    with pytest.raises(SystemExit) as err:
        main(["rope", "smollm2", "--engines", "llama.cpp", "--logits-tokens", "8"])
    assert err.value.code == 2

