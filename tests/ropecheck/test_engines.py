"""``posenc rope --engines``: a bug zoo of shim engines, each reproducing a published wrong reading of a RoPE
config, flagged with its class — and the correct reading flagged by nobody; the real engines where installed."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.ropecheck import engines
from posenc.ropecheck.audit import audit
from posenc.ropecheck.engines import Case, Engine, reference

TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2,
        "intermediate_size": 128, "vocab_size": 100}


def llama(max_pos: int = 4096, **extra) -> dict:
    return {"model_type": "llama", **TINY, "max_position_embeddings": max_pos, **extra}


YARN = llama(16384, rope_theta=10000.0, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 4096})
YARN_MSCALE = llama(16384, rope_theta=10000.0, rope_scaling={
    "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
    "mscale_all_dim": 0.5})
YARN_EXPLICIT = llama(16384, rope_theta=10000.0, rope_scaling={
    "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "attention_factor": 1.3})
LLAMA3 = llama(32768, rope_theta=500000.0, rope_scaling={
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 4096})
DYNAMIC = llama(4096, rope_theta=10000.0, rope_scaling={"rope_type": "dynamic", "factor": 4.0})
LONGROPE = {"model_type": "phi3", **TINY, "max_position_embeddings": 16384, "original_max_position_embeddings": 4096,
            "rope_theta": 10000.0, "rope_scaling": {"type": "longrope", "short_factor": [1.0 + i / 10 for i in range(8)],
                                                    "long_factor": [2.0 + i for i in range(8)]}}
TF5 = llama(16384, rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                    "original_max_position_embeddings": 4096})
GEMMA3 = {"model_type": "gemma3_text", **TINY, "num_hidden_layers": 6, "head_dim": 16, "sliding_window": 512,
          "max_position_embeddings": 32768,
          "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
          "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}


def cases(config: dict) -> list[Case]:
    return engines.cases_of(audit(config, hf_check=False), config)


class Shim(Engine):
    """An engine computing posenc's reference of a *mutated* reading in float32 (an engine's own rounding)."""

    def __init__(self, name: str, read) -> None:
        self.name, self.read = name, read

    def compute(self, case: Case) -> dict:
        numbers = self.read(case)
        angles32 = numbers["angles"].float().double()  # p·θ rounded as a float32 engine holds it
        factor = float(numbers["cos"][0].hypot(numbers["sin"][0]).max())
        x = engines.probe(case.head_dim)
        return {"rotated": engines.rotate(x, angles32.cos() * factor, angles32.sin() * factor,
                                          numbers.get("pairing", case.pairing)).float()}


def _opts(**change):
    return lambda case: reference(case, options={**case.options, **change})


def _llama3_original(case):  # original_max_position_embeddings read as max_position_embeddings
    return reference(case, options={**case.options, "original_max_len": case.config["max_position_embeddings"]})


def _interleaved(case):
    return reference(case, "interleaved")


def _factor_one(case):
    ref = reference(case)
    f = float(ref["cos"][0].hypot(ref["sin"][0]).max())
    return {**ref, "cos": ref["cos"] / f, "sin": ref["sin"] / f, "rotated": ref["rotated"] / f}


def _gemma_every_layer(case):
    if case.scheme == "rope":
        sib = case.siblings[0]
        return reference(case, scheme=sib["scheme"], options={**sib["options"], "base": case.options["base"]})
    return reference(case)


def _twice(case):
    s = engines._scheme(case.scheme, case.options, case.head_dim)
    return engines._per_position(case, lambda p: s.inv_freq_at(2 * (p + 1)), 1.0)


def _late_switch(case):
    s = engines._scheme(case.scheme, case.options, case.head_dim)
    L = s.original_max_len
    short, long = s.inv_freq_at(L), s.inv_freq_at(L + 1)
    return engines._per_position(case, lambda p: long if p > L else short, float(s.attention_factor))


def _rope_scaling_reader(case):
    cfg = case.config
    block = cfg.get("rope_scaling")  # transformers-4 code: rope_parameters never looked at
    assert block is None
    return reference(case, scheme="rope", options={"base": float(cfg.get("rope_theta", 10000.0))})


def _unscaled(case):
    return reference(case, scheme="rope", options={"base": case.options["base"]})


ZOO = [  # (config, shim, the class it must be flagged with, the layer type it shows on)
    (YARN_MSCALE, _opts(mscale=None, mscale_all_dim=None), "yarn-ignores-mscale", "all"),
    (YARN_EXPLICIT, _opts(attention_factor=None), "yarn-drops-attention-factor", "all"),
    (YARN, _factor_one, "attention-factor-one", "all"),
    (GEMMA3, _gemma_every_layer, "scaling-on-wrong-layers", "sliding_attention"),
    (LLAMA3, _llama3_original, "llama3-scaling-misread", "all"),
    (LONGROPE, _late_switch, "longrope-switch-boundary", "all"),
    (llama(rope_theta=10000.0), _interleaved, "pairing", "all"),
    (DYNAMIC, _twice, "dynamic-ntk-positions-twice", "all"),
    (TF5, _rope_scaling_reader, "rope_scaling-reader", "all"),
    (YARN, _unscaled, "scaling-dropped", "all"),  # a converted GGUF without its YaRN keys
]


@pytest.mark.parametrize("config, read, bug, layer_type", ZOO, ids=[z[2] for z in ZOO])
def test_each_published_bug_is_flagged_with_its_class(config, read, bug, layer_type):
    engines.EXTRA["shim"] = Shim("shim", read)
    engines.EXTRA["correct"] = Shim("correct", reference)
    try:
        rows = engines.compare(cases(config), ["shim", "correct"])
    finally:
        engines.EXTRA.clear()
    bad = [r for r in rows if r["engine"] == "shim" and r["layer_type"] == layer_type]
    assert bad and bad[0]["status"] == "differs" and bad[0]["bug_class"] == bug, bad
    assert bad[0]["first_diverging"]["position"] in cases(config)[0].positions
    assert all(r["status"] == "agrees" for r in rows if r["engine"] == "correct"), rows
    if config is GEMMA3:  # the global layers are right in this port: not flagged
        assert [r["status"] for r in rows if r["engine"] == "shim" and r["layer_type"] == "full_attention"] == \
            ["agrees"]
    assert engines.exit_status(rows) == engines.EXIT_DIFFERS


def test_no_variant_names_a_correct_reading():
    for config, *_ in ZOO:
        for case in cases(config):
            ref = reference(case)
            for bug, _, numbers in engines.bug_variants(case):
                assert (numbers["rotated"] - ref["rotated"]).abs().max() > 1e-9, bug


def test_the_cli_gates_on_a_differing_engine(tmp_path, capsys, monkeypatch):
    from posenc.cli import main

    monkeypatch.delenv("POSENC_LLAMACPP_BUILD", raising=False)  # no llama.cpp build: reported, never skipped
    monkeypatch.setenv("POSENC_ENGINES", str(tmp_path / "engines"))

    path = tmp_path / "config.json"
    path.write_text(json.dumps(YARN_MSCALE))
    engines.EXTRA["shim"] = Shim("shim", _opts(mscale=None, mscale_all_dim=None))
    try:
        assert main(["rope", str(path), "--no-hf", "--engines", "shim,llama.cpp", "--json", "-"]) == 3
    finally:
        engines.EXTRA.clear()
    rows = json.loads(capsys.readouterr().out)["engines"]
    assert {k for k in rows[0]} >= {"engine", "version", "status", "max_abs_err", "first_diverging", "bug_class",
                                    "reason"}
    assert rows[0]["bug_class"] == "yarn-ignores-mscale"
    assert rows[1]["status"] == "unavailable" and "posenc engines install llama.cpp" in rows[1]["reason"]
    assert main(["rope", str(path), "--no-hf", "--engines", "nonesuch"]) == 2


@pytest.mark.parametrize("config", [llama(rope_theta=500000.0), YARN_MSCALE, LLAMA3, DYNAMIC, LONGROPE, GEMMA3, TF5],
                         ids=["llama", "yarn-mscale", "llama3", "dynamic", "longrope", "gemma3", "tf5-yarn"])
def test_transformers_agrees_on_tiny_configs(config):
    pytest.importorskip("transformers")
    rows = engines.compare(cases(config), ["hf"])
    assert rows and all(r["status"] == "agrees" for r in rows), rows


@pytest.mark.parametrize("name", ["torchtune", "x-transformers", "rotary-embedding-torch", "mlx"])
def test_installed_engines_agree_on_plain_rope(name):
    why = engines.engine(name).available()
    if why:
        pytest.skip(f"{name}: {why}")
    rows = engines.compare(cases(llama(rope_theta=500000.0)), [name])
    assert rows[0]["status"] == "agrees", rows


def test_pairing_is_read_per_coordinate():
    case = cases(llama(rope_theta=10000.0))[0]
    ref = reference(case)
    assert torch.allclose(engines.rotate(engines.probe(16), ref["cos"], ref["sin"], "half"), ref["rotated"])
