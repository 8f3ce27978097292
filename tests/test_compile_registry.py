"""Every registered position scheme under ``torch.compile``: 0 graph breaks, compiled == eager.

The schemes are enumerated from the registry (``posenc.positions.names()``), so a scheme is covered the day
it is registered (in the slow run; the ``FAST`` subset runs always). For each, a tiny decoder-only model
(d = 16, 2 heads, 1 layer, 2 × 8 tokens):

* forward (evaluation): ``torch._dynamo.explain`` reports 0 graph breaks and 1 graph; the compiled forward
  equals the eager one;
* training step (training mode, forward + cross-entropy; the backward is compiled by AOTAutograd from the
  same graph): 0 graph breaks and 1 graph; compiled with ``aot_eager`` (the joint forward + backward graph
  inductor would compile), the loss and every gradient equal eager's — the position scheme's own
  parameters included, for the schemes that have trainable ones.

``explain`` counts every break instead of raising at the first, so a failure names all of them.
``benchmarks/compile/graph_breaks.py`` writes the same per-scheme counts to ``benchmarks/compile/graph-breaks.md``,
which docs/compile.md quotes.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo
import torch.nn.functional as F

from posenc import ModelConfig, build_decoder_only
from posenc.positions import names

VOCAB = 50

#: schemes refused for decoder-only models by design, with the reason. None today: every registered scheme
#: builds a decoder-only model (``test_refused_schemes_are_refused`` keeps this list honest).
REFUSED_DECODER_ONLY: dict[str, str] = {}

#: option sets besides the defaults whose code path differs under compile: FoPE's trainable coefficients
VARIANTS: dict[str, tuple[str, dict]] = {"fope-learnable": ("fope", {"learnable": True})}

#: compiled draws of the randomized scheme in training mode come from the global RNG, eager ones from the
#: scheme's own generator (docs/compile.md), so its training step is compared with eager's in evaluation mode
#: (the given positions); its training-mode graph is still explained, and test_compile.py checks the draws
DRAWS_IN_TRAINING = {"randomized"}


def cases() -> list[tuple[str, str, dict]]:
    """(test id, scheme, options): every registered scheme with its defaults, then the VARIANTS."""
    return [(n, n, {}) for n in names() if n not in REFUSED_DECODER_ONLY] + [(k, *v) for k, v in VARIANTS.items()]


def tiny_model(name: str, options: dict):
    # the naive index widens token vectors by one column: an untied head
    cfg = ModelConfig(vocab_size=VOCAB, dim=16, num_heads=2, num_layers=1, ffn_dim=32, position=name,
                      position_options=options, tie_embeddings=name != "naive")
    return build_decoder_only(cfg)


def explain(fn, *args) -> tuple[int, int, str]:
    """(graph breaks, graphs, the distinct break reasons) of dynamo tracing ``fn(*args)``, from a fresh cache."""
    dynamo.reset()
    e = dynamo.explain(fn)(*args)
    reasons = "; ".join(sorted({str(b.reason).splitlines()[0][:200] for b in e.break_reasons}))
    return e.graph_break_count, e.graph_count, reasons


def step_fn(model):
    def step(ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = model(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return step


def loss_and_grads(model, fn, ids, targets):
    model.zero_grad(set_to_none=True)
    loss = fn(ids, targets)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


#: run without ``-m "not slow"`` deselecting them: one scheme per family and the scheme that used to break
#: (FoPE: 11 breaks before its kept pairs were indexed); the whole registry takes ≈ 100 CPU seconds, so the
#: rest is marked slow (every scheme's fullgraph forward and backward also runs fast in test_compile.py)
FAST = {"sinusoidal", "rope", "t5", "fope", "fope-learnable"}
CASES = [pytest.param(*c, id=c[0], marks=() if c[0] in FAST else pytest.mark.slow) for c in cases()]


@pytest.mark.parametrize("case, name, options", CASES)
def test_forward_has_no_graph_break(case, name, options, gen):
    model = tiny_model(name, options).eval()
    ids = torch.randint(0, VOCAB, (2, 8), generator=gen)
    breaks, graphs, reasons = explain(model, ids)
    assert (breaks, graphs) == (0, 1), f"{case}: {breaks} graph breaks, {graphs} graphs: {reasons}"
    dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), model(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case, name, options", CASES)
def test_training_step_has_no_graph_break(case, name, options, gen):
    model = tiny_model(name, options).train()
    ids, targets = (torch.randint(0, VOCAB, (2, 8), generator=gen) for _ in range(2))
    step = step_fn(model)
    breaks, graphs, reasons = explain(step, ids, targets)
    assert (breaks, graphs) == (0, 1), f"{case}: {breaks} graph breaks, {graphs} graphs: {reasons}"
    if name in DRAWS_IN_TRAINING:
        model.eval()
    want_loss, want_grads = loss_and_grads(model, step, ids, targets)
    dynamo.reset()
    got_loss, got_grads = loss_and_grads(model, torch.compile(step, backend="aot_eager", fullgraph=True), ids, targets)
    torch.testing.assert_close(got_loss, want_loss, atol=1e-5, rtol=1e-5)
    assert got_grads.keys() == want_grads.keys()
    scheme_params = {f"position.{n}" for n, p in model.position.named_parameters() if p.requires_grad}
    assert scheme_params <= got_grads.keys(), f"{case}: no gradient for {sorted(scheme_params - got_grads.keys())}"
    for key in want_grads:
        torch.testing.assert_close(got_grads[key], want_grads[key], atol=1e-5, rtol=1e-5, msg=key)


def test_refused_schemes_are_refused():
    """A scheme listed as refused for decoder-only models is registered and does refuse to build one."""
    for name, reason in REFUSED_DECODER_ONLY.items():
        assert name in names(), f"{name} is listed as refused but not registered"
        with pytest.raises((ValueError, TypeError)):
            tiny_model(name, {})


def test_every_registered_scheme_is_enumerated():
    """The enumeration is the registry: no scheme is left out silently."""
    covered = {name for _, name, _ in cases()} | set(REFUSED_DECODER_ONLY)
    assert covered == set(names())
