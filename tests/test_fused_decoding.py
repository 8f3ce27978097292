"""posenc.models.fused: a pre-norm block's decoding step in one kernel call, against the block's own modules."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from posenc import kernels
from posenc.models import fused
from posenc.models.decoder import DecoderConfig, build_decoder
from posenc.models.quant import QuantLinear, quantise_groups
from posenc.pretrained.as_stored import _install

module = kernels.load()
#: How far the fused step's hidden state may be from the modules', relative to its largest value. Attention and
#: the activation round differently (ulps), and an ulp can move a value across an 8-bit rounding boundary of
#: the next product's activations: one such flip changes an output by |w| · max|x| / 127. Measured over 30
#: seeds × 24 cases: up to 2.1 % of max |h| (once; typically below 0.5 %); a wrong cache slot, window edge, rotation
#: pairing or gain moves it by 10–100 %.
ROUNDING = 3e-2
pytestmark = pytest.mark.skipif(module is None, reason=f"posenc's kernel is not built here: {kernels.status()}")


def quantised_llama(gen: torch.Generator, *, bits: int, pairing: str, bias: bool, **overrides):
    """A random posenc Llama (random norms too) whose every projection is on posenc's kernel at ``bits``."""
    config = DecoderConfig(**{"vocab_size": 96, "dim": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
                              "ffn_dim": 96, "qkv_bias": bias, "position_options": {"pairing": pairing, "base": 500.0},
                              **overrides})
    model = build_decoder(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.rand(p.shape, generator=gen) + 0.5 if name.endswith("norm.weight")
                    else torch.randn(p.shape, generator=gen) * 0.2)
        for name, m in list(model.named_modules()):
            if type(m) is nn.Linear:
                _install(model, name, QuantLinear.from_groups(quantise_groups(m.weight, bits=bits), bias=m.bias,
                                                              kernel="posenc"))
    return model


def prefilled(model, gen: torch.Generator, length: int):
    cache = model.new_cache()
    with torch.no_grad():
        model.hidden(torch.randint(0, 96, (1, length), generator=gen), cache=cache)
    return cache


def one_step(model, cache, token: int, *, on: bool, monkeypatch) -> torch.Tensor:
    monkeypatch.setenv("POSENC_FUSED", "1" if on else "0")
    for layer in model.layers:
        layer.__dict__.pop("_fused_plan", None)
    with torch.no_grad():
        return model.hidden(torch.tensor([[token]]), cache=cache)


@pytest.mark.parametrize("bits", [4, 8, "mixed"])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("bias", [False, True])
def test_a_fused_step_equals_the_modules(bits, pairing: str, bias: bool, gen: torch.Generator,
                                         monkeypatch) -> None:
    """From one cache state, the fused step and the modules give the same hidden state and write the same key,
    value and position (up to the rounding of attention, SiLU and the 8-bit activations that follow them).
    "mixed": 4-bit matrices with float32 ones among them (a GGUF's Q6_K, held dequantised)."""
    model = quantised_llama(gen, bits=4 if bits == "mixed" else bits, pairing=pairing, bias=bias)
    if bits == "mixed":
        for layer in model.layers:
            for parent, name in ((layer.attn, "v_proj"), (layer.ffn, "down_proj")):
                q = getattr(parent, name)
                linear = nn.Linear(q.in_features, q.out_features, bias=q.bias is not None)
                with torch.no_grad():
                    linear.weight.copy_(q.exact_weight())
                    if q.bias is not None:
                        linear.bias.copy_(q.bias)
                setattr(parent, name, linear)
    length = int(torch.randint(1, 150, (1,), generator=gen))  # a cache that moves to larger room, sometimes
    cache = prefilled(model, gen, length)
    token = int(torch.randint(0, 96, (1,), generator=gen))
    theirs, ours = copy.deepcopy(cache), copy.deepcopy(cache)
    want = one_step(model, theirs, token, on=False, monkeypatch=monkeypatch)
    assert all(layer.__dict__["_fused_plan"] is False for layer in model.layers)  # switched off: modules ran
    got = one_step(model, ours, token, on=True, monkeypatch=monkeypatch)
    assert all(layer.__dict__["_fused_plan"] for layer in model.layers)  # the fused step ran in every block
    assert got.shape == want.shape == (1, 1, 64)
    torch.testing.assert_close(got, want, rtol=0, atol=ROUNDING * float(want.abs().max()))
    for a, b in zip(ours, theirs):
        assert a.length == b.length == length + 1 and torch.equal(a.positions, b.positions)
        assert torch.equal(a.k[..., :-1, :], b.k[..., :-1, :]) and torch.equal(a.v[..., :-1, :], b.v[..., :-1, :])
        for new_a, new_b in ((a.k[..., -1, :], b.k[..., -1, :]), (a.v[..., -1, :], b.v[..., -1, :])):
            torch.testing.assert_close(new_a, new_b, rtol=0, atol=ROUNDING * float(new_b.abs().max()))
    # the first layer's inputs are equal, so its new key and value are the modules' to the last rounding
    torch.testing.assert_close(ours[0].k[..., -1, :], theirs[0].k[..., -1, :], rtol=1e-6, atol=1e-6)
    if bits == "mixed":  # a float32 value projection: F.linear's products summed in another order
        torch.testing.assert_close(ours[0].v[..., -1, :], theirs[0].v[..., -1, :], rtol=1e-5, atol=1e-6)
    else:  # the kernel's product, the same call: bit for bit
        assert torch.equal(ours[0].v[..., -1, :], theirs[0].v[..., -1, :])


#: Gemma 3's block: norms before and after each branch with 1 + g gains, QK-norm, tanh-GELU, a sliding window
GEMMA = {"block": "sandwich", "norm": "rms-offset", "qk_norm": "rms-offset", "ffn": "geglu", "attn_scale": 0.3}


@pytest.mark.parametrize("kind", ["llama", "gemma-window-6", "gemma-full"])
def test_many_fused_steps_follow_the_modules(kind: str, gen: torch.Generator, monkeypatch) -> None:
    """Twenty steps each way from one prompt: the hidden states stay together (no drift from a wrong slot, a
    wrong window edge or a key dropped too early), and the caches hold the same keys."""
    extra = {} if kind == "llama" else GEMMA | ({"sliding_window": 6} if "window" in kind else {})
    model = quantised_llama(gen, bits=4, pairing="half", bias=False, **extra)
    cache = prefilled(model, gen, 60)  # 60 held + 64 room: the 20 steps grow in place, then move once at most
    tokens = torch.randint(0, 96, (20,), generator=gen).tolist()
    runs, caches = [], []
    for on in (False, True):
        c = copy.deepcopy(cache)
        runs.append(torch.cat([one_step(model, c, t, on=on, monkeypatch=monkeypatch) for t in tokens], dim=1))
        caches.append(c)
        assert all(bool(layer.__dict__["_fused_plan"]) == on for layer in model.layers)
    torch.testing.assert_close(runs[1], runs[0], rtol=0, atol=ROUNDING * float(runs[0].abs().max()))
    for a, b in zip(*caches):
        assert (a.length, a.dropped, a.stored) == (b.length, b.dropped, b.stored)
        assert torch.equal(a.positions, b.positions)
        assert a.stored == (6 if "window" in kind else 80) - (1 if "window" in kind else 0)  # W − 1 kept for the next
        torch.testing.assert_close(a.k, b.k, rtol=0, atol=ROUNDING * float(b.k.abs().max()))


def test_a_changed_gain_rebuilds_the_plan(gen: torch.Generator, monkeypatch) -> None:
    """Gemma's gains 1 + g are formed once per plan: a g changed in place is seen at the next step."""
    model = quantised_llama(gen, bits=8, pairing="half", bias=False, **GEMMA)
    cache = prefilled(model, gen, 10)
    one_step(model, copy.deepcopy(cache), 7, on=True, monkeypatch=monkeypatch)  # plans formed with these gains
    assert all(layer.__dict__["_fused_plan"] for layer in model.layers)
    with torch.no_grad():
        for layer in model.layers:
            layer.ffn_post_norm.weight.mul_(0.5)
            layer.attn.k_norm.weight.add_(0.25)
    monkeypatch.setenv("POSENC_FUSED", "1")
    with torch.no_grad():
        got = model.hidden(torch.tensor([[7]]), cache=copy.deepcopy(cache))  # the same plans' objects, changed
    want = one_step(model, copy.deepcopy(cache), 7, on=False, monkeypatch=monkeypatch)
    torch.testing.assert_close(got, want, rtol=0, atol=ROUNDING * float(want.abs().max()))


def test_the_modules_run_where_the_fused_step_does_not_apply(gen: torch.Generator, monkeypatch) -> None:
    monkeypatch.setenv("POSENC_FUSED", "1")
    model = quantised_llama(gen, bits=4, pairing="half", bias=False)
    block = model.layers[0]
    cache = prefilled(model, gen, 8)
    x, pos = torch.randn(1, 1, 64, generator=gen), torch.tensor([8])
    with torch.no_grad():
        assert fused.block_step(block, torch.randn(2, 1, 64), pos, cache) is None  # two sequences
        assert fused.block_step(block, torch.randn(1, 2, 64), torch.tensor([8, 9]), cache) is None  # two tokens
        assert fused.block_step(block, x, pos, None) is None  # no cache
        assert fused.block_step(block, x, pos, model.new_cache()[0]) is None  # an empty cache: nothing held
        assert cache[0].length == 8  # none of the refusals touched the cache
    assert fused.block_step(block, x, pos, cache[0]) is None  # gradients recorded
    with torch.no_grad():
        assert fused.block_step(block, x, pos, cache[0]) is not None and cache[0].length == 9
        block.attn.k_proj = nn.Linear(64, 32, bias=False)  # a module replaced: the plan is rebuilt
        assert fused.block_step(block, x, torch.tensor([9]), cache[0]) is not None  # a float32 matrix: multiplied
        assert block.__dict__["_fused_plan"]["bits"][1] == 0 and cache[0].length == 10
        block.attn.k_proj = nn.Linear(64, 32, bias=False).to(torch.bfloat16)  # not one the kernel reads
        assert fused.block_step(block, x, torch.tensor([10]), cache[0]) is None
    sinks = quantised_llama(gen, bits=4, pairing="half", bias=False, attn_sinks=True)
    scache = prefilled(sinks, gen, 8)
    with torch.no_grad():
        assert fused.block_step(sinks.layers[0], x, pos, scache[0]) is None  # attention sinks: the modules' rule


def test_the_kernel_refuses_wrong_cache_slots(gen: torch.Generator) -> None:
    model = quantised_llama(gen, bits=4, pairing="half", bias=False)
    cache = prefilled(model, gen, 8)
    with torch.no_grad():
        plan = fused._plan(model.layers[0])
        assert plan
        keys, values, start, index = cache[0].reserve(torch.tensor([8]))
        args = (torch.randn(1, 1, 64), plan["norms"], plan["eps"], plan["weights"], plan["scales"], plan["bits"],
                plan["biases"], [], 0.0, torch.ones(8), torch.zeros(8), True, keys, values)
        with pytest.raises(RuntimeError, match="start <= index < capacity"):
            module.decode_block(*args, start, keys.shape[2], 0.25, 0)
        with pytest.raises(RuntimeError, match="Dh/2"):
            module.decode_block(*args[:9], torch.ones(4), torch.zeros(4), True, keys, values, start, index, 0.25, 0)
        with pytest.raises(RuntimeError, match=r"\(1, 1, D\)"):
            module.decode_block(torch.randn(2, 1, 64), *args[1:], start, index, 0.25, 0)
        with pytest.raises(RuntimeError, match="activation"):
            module.decode_block(*args, start, index, 0.25, 2)
        with pytest.raises(RuntimeError, match="two or four norms"):
            module.decode_block(args[0], plan["norms"][:1], plan["eps"][:1], *args[3:], start, index, 0.25, 0)


@pytest.mark.parametrize("kind", ["llama", "gemma-window-5"])
def test_a_whole_token_is_one_call_whatever_the_threads(kind: str, gen: torch.Generator, monkeypatch) -> None:
    """Every block fused: a decoding step is one ``decode_blocks`` call for the whole token, and its hidden
    states, keys and values are bit for bit the same at 1, 2 and 3 threads (each output is computed by one thread
    in one order; 3 threads on this machine's 2 cores splits unevenly) and the same as one call per block."""
    extra = {} if kind == "llama" else GEMMA | {"sliding_window": 5}
    model = quantised_llama(gen, bits=4, pairing="interleaved", bias=False, num_layers=3, **extra)
    cache = prefilled(model, gen, int(torch.randint(3, 40, (1,), generator=gen)))
    tokens = torch.randint(0, 96, (6,), generator=gen).tolist()
    calls = []
    real = module.decode_blocks
    monkeypatch.setattr(fused.kernels, "loaded", lambda: _Counting(module, real, calls))
    threads = torch.get_num_threads()
    runs = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            c = copy.deepcopy(cache)
            calls.clear()
            hidden = torch.cat([one_step(model, c, t, on=True, monkeypatch=monkeypatch) for t in tokens], dim=1)
            assert calls == [3] * len(tokens)  # one call per token, three blocks in it
            runs.append((hidden, c))
    finally:
        torch.set_num_threads(threads)
    for hidden, c in runs[1:]:
        assert torch.equal(hidden, runs[0][0])
        for a, b in zip(c, runs[0][1]):
            assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v) and torch.equal(a.positions, b.positions)
    # one call per block (a block the whole-token path cannot take makes the others go one by one): the same bits
    c = copy.deepcopy(cache)
    with torch.no_grad():
        per_block = []
        for t in tokens:
            x = model.embed(torch.tensor([[t]]))
            if model.embed_scale is not None:
                x = x * torch.tensor(model.embed_scale, dtype=x.dtype)
            positions = torch.tensor([c[0].length])
            for layer, lc in zip(model.layers, c):
                x = fused.block_step(layer, x, positions, lc)
            per_block.append(model.norm(x))
    assert torch.equal(torch.cat(per_block, dim=1), runs[0][0])


class _Counting:
    """posenc's kernel module, with decode_blocks counting the blocks of each call."""

    def __init__(self, module, real, calls: list) -> None:
        self._module, self._real, self._calls = module, real, calls

    def __getattr__(self, name: str):
        return getattr(self._module, name)

    def decode_blocks(self, x, blocks, *rest):
        self._calls.append(len(blocks))
        return self._real(x, blocks, *rest)


def test_the_whole_token_path_refuses_without_touching_a_cache(gen: torch.Generator, monkeypatch) -> None:
    """One block the fused step does not take (here: attention sinks in one layer): the whole-token path gives
    None before reserving anything, and the blocks go one by one."""
    monkeypatch.setenv("POSENC_FUSED", "1")
    model = quantised_llama(gen, bits=4, pairing="half", bias=False)
    cache = prefilled(model, gen, 8)
    x, pos = torch.randn(1, 1, 64, generator=gen), torch.tensor([8])
    model.layers[1].train()  # a block in training mode is left to its modules
    with torch.no_grad():
        assert fused.steps(list(model.layers), x, pos, cache) is None
        assert [c.length for c in cache] == [8, 8]
        model.layers[1].eval()
        assert fused.steps(list(model.layers), x, pos, cache) is not None
        assert [c.length for c in cache] == [9, 9]
        with pytest.raises(RuntimeError, match="one cos, sin"):
            module.decode_blocks(x, [model.layers[0]._fused_plan["block"]], [], [], [], [], [], [])
