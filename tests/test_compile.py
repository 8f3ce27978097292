"""posenc under torch.compile: one graph per model for every scheme, compiled == eager, no host sync.

Fast tests trace with dynamo's "eager" / "aot_eager" backends (the graph-break
count and the backward trace do not depend on the code generator); the real
inductor compiles are marked slow (tens of CPU seconds each, C++ builds).
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo
from torch._dynamo.testing import CompileCounterWithBackend

from posenc import ModelConfig, build_decoder_only, build_encoder_decoder
from posenc.positions import build, names

VOCAB = 50


def small_config(name: str, **overrides) -> ModelConfig:
    # the naive index widens token vectors by one column: an untied head
    options = dict(vocab_size=VOCAB, dim=16, num_heads=2, num_layers=1, ffn_dim=32, position=name,
                   tie_embeddings=name != "naive")
    return ModelConfig(**{**options, **overrides})


def model_and_inputs(kind: str, name: str, gen: torch.Generator):
    cfg = small_config(name)
    src = torch.randint(0, VOCAB, (2, 8), generator=gen)
    if kind == "decoder-only":
        return build_decoder_only(cfg).eval(), (src,)
    return build_encoder_decoder(cfg).eval(), (src, torch.randint(0, VOCAB, (2, 6), generator=gen))


def graph_breaks(fn, *args) -> str:
    """dynamo.explain's break count and reasons, for an assertion message."""
    dynamo.reset()
    e = dynamo.explain(fn)(*args)
    return f"{e.graph_break_count} graph breaks: " + "; ".join(sorted({str(b.reason)[:200] for b in e.break_reasons}))


def fwd_bwd(model, args, fn=None):
    """Forward through ``fn`` (default the model), backward; the output and the model's gradients by name."""
    model.zero_grad(set_to_none=True)
    out = (model if fn is None else fn)(*args)
    out.square().mean().backward()
    return out.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def assert_compiled_matches_eager(model, args, backend: str, *, atol: float = 1e-5) -> CompileCounterWithBackend:
    """fullgraph compile (raises on any graph break), forward and backward; outputs and gradients equal eager's."""
    want_out, want_grads = fwd_bwd(model, args)
    counter = CompileCounterWithBackend(backend)
    dynamo.reset()
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    try:
        got_out, got_grads = fwd_bwd(model, args, compiled)
    except Exception as exc:  # say which breaks, not only the first
        raise AssertionError(f"{type(exc).__name__}: {str(exc)[:500]}\n{graph_breaks(model, *args)}") from exc
    assert counter.frame_count == 1, f"{counter.frame_count} graphs"
    torch.testing.assert_close(got_out, want_out, atol=atol, rtol=1e-5)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], atol=atol, rtol=1e-5, msg=name)
    return counter


# -- one graph, forward and backward, for every registered scheme -----------------------------------------
#: one scheme per family and code path for the encoder–decoder in the fast run (every scheme: slow run);
#: its encoder and decoder call the same hooks as the decoder-only model, which every scheme runs fast
FAMILY_REPRESENTATIVES = ["sinusoidal", "rope", "t5", "alibi"]


@pytest.mark.parametrize("name", names())
def test_every_scheme_compiles_to_one_graph(name, gen):
    """fullgraph=True succeeds for forward and backward; the compiled model computes what the eager one does."""
    model, args = model_and_inputs("decoder-only", name, gen)
    assert_compiled_matches_eager(model, args, "eager")


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=() if n in FAMILY_REPRESENTATIVES else pytest.mark.slow) for n in names()])
def test_every_scheme_compiles_to_one_graph_encoder_decoder(name, gen):
    model, args = model_and_inputs("encoder-decoder", name, gen)
    assert_compiled_matches_eager(model, args, "eager")


def test_explain_reports_no_graph_break_for_the_issue_model(gen):
    """The issue's reproduction: explain() on a 2-layer RoPE decoder reported 22 breaks, all Tensor.item()."""
    model = build_decoder_only(ModelConfig(vocab_size=VOCAB, dim=32, num_heads=2, num_layers=2, position="rope"))
    ids = torch.randint(0, VOCAB, (2, 8), generator=gen)
    dynamo.reset()
    e = dynamo.explain(model)(ids)
    assert (e.graph_break_count, e.graph_count) == (0, 1), graph_breaks(model, ids)


@pytest.mark.parametrize("name", ["rope", "t5"])
def test_backward_traces_through_aot_autograd(name, gen):
    """aot_eager traces the joint forward+backward graph (what inductor compiles) for each code path."""
    model, args = model_and_inputs("decoder-only", name, gen)
    assert_compiled_matches_eager(model, args, "aot_eager")


#: the encoder–decoder's own code paths under aot_autograd: one scheme per family, plus the position-remapping
#: path (dca, rerope), the query-key logit hook (cope) and the value hook (shaw); every scheme's backward is
#: traced decoder-only
ENCODER_DECODER_AOT = [*FAMILY_REPRESENTATIVES, "dca", "rerope", "cope", "shaw"]


@pytest.mark.slow
@pytest.mark.parametrize("kind, name", [("decoder-only", n) for n in names()]
                         + [("encoder-decoder", n) for n in ENCODER_DECODER_AOT])
def test_every_scheme_backward_through_aot_autograd(name, kind, gen):
    model, args = model_and_inputs(kind, name, gen)
    assert_compiled_matches_eager(model, args, "aot_eager")


def test_randomized_training_compiles_and_draws_valid_positions(gen):
    """Training mode draws positions inside the graph (global RNG): sorted, distinct, within [0, max_len)."""
    scheme = build("randomized", dim=16, num_heads=2, max_len=40).train()
    draw = torch.compile(lambda x: scheme.sample_positions(x.shape[0], x.shape[1]), fullgraph=True, backend="eager")
    positions = draw(torch.zeros(3, 10))
    assert positions.shape == (3, 10) and positions.dtype == torch.long
    assert bool((positions[:, 1:] > positions[:, :-1]).all()) and 0 <= int(positions.min()) and int(positions.max()) < 40
    model = build_decoder_only(small_config("randomized", position_options={"max_len": 40})).train()
    ids = torch.randint(0, VOCAB, (2, 8), generator=gen)
    dynamo.reset()
    out = torch.compile(model, fullgraph=True, backend="eager")(ids)
    out.sum().backward()
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["rope", "rope-yarn", "sinusoidal"])
def test_trigonometry_is_one_op_in_the_graph(name, gen):
    """cos/sin of the angle table enter the graph as posenc::cos_sin, not as pointwise cos/sin that inductor
    would fuse into (and recompute for) every element of the queries and keys; values equal eager's."""
    model, args = model_and_inputs("decoder-only", name, gen)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    dynamo.reset()
    out = torch.compile(model, backend=capture, fullgraph=True)(*args)
    code = "\n".join(g.code for g in graphs)
    assert "posenc.cos_sin" in code, code[:2000]
    assert ".cos(" not in code and ".sin(" not in code and "torch.cos" not in code and "torch.sin" not in code
    torch.testing.assert_close(out, model(*args), atol=0, rtol=0)


def test_randomized_sampled_evaluation_compiles_and_draws_valid_positions(gen):
    """eval_positions='sampled' (lengthgen's protocol) draws inside the graph too, and still refuses a cached continuation."""
    options = {"max_len": 40, "eval_positions": "sampled"}
    model = build_decoder_only(small_config("randomized", position_options=options)).eval()
    ids = torch.randint(0, VOCAB, (2, 8), generator=gen)
    dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    out = compiled(ids)
    assert out.shape == (2, 8, VOCAB) and torch.isfinite(out).all()
    # the draws are positions, not the contiguous 0 … T-1: the logits differ from the 'given' model's
    given = build_decoder_only(small_config("randomized", position_options={"max_len": 40})).eval()
    given.load_state_dict(model.state_dict())
    assert not torch.allclose(out, given(ids))
    with pytest.raises(Exception, match="cached continuation"):
        compiled(ids, positions=torch.arange(3, 11).expand(2, 8))


# -- validation: clear errors, no graph break ---------------------------------------------------------------
@pytest.mark.parametrize("backend", ["eager", pytest.param("aot_eager", marks=pytest.mark.slow)])
def test_out_of_range_ids_raise_inside_the_graph(backend, gen):
    """Under compile the range check is an in-graph assertion with the eager message minus the value."""
    model = build_decoder_only(small_config("rope")).eval()
    dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    ids = torch.randint(0, VOCAB, (2, 8), generator=gen)
    compiled(ids)
    ids[1, 3] = VOCAB
    with pytest.raises(RuntimeError, match=r"outside the vocabulary \[0, 50\); check the tokenizer"):
        compiled(ids)
    with pytest.raises(ValueError, match=r"token id 50 is outside the vocabulary \[0, 50\)"):
        model(ids)  # eager keeps the value in its message


def test_negative_and_too_large_positions_raise_inside_the_graph(gen):
    ids = torch.randint(0, VOCAB, (1, 4), generator=gen)
    model = build_decoder_only(small_config("t5")).eval()
    dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    compiled(ids, positions=torch.arange(4))
    with pytest.raises(RuntimeError, match="positions must be >= 0"):
        compiled(ids, positions=torch.tensor([0, 1, -2, 3]))
    learned = build_decoder_only(small_config("learned", position_options={"max_len": 8})).eval()
    dynamo.reset()
    compiled = torch.compile(learned, fullgraph=True, backend="eager")
    compiled(ids, positions=torch.arange(4))
    with pytest.raises(RuntimeError, match="learned position table has 8 rows"):
        compiled(ids, positions=torch.arange(6, 10))


# -- cached decoding: one prefill graph and one decoding graph, whatever the length -----------------------
def count_graphs(compile_model, run, steps: tuple[int, ...]) -> list[int]:
    """Compile with a counting backend; the number of graphs after generating each count of tokens in turn."""
    counter = CompileCounterWithBackend("eager")
    dynamo.reset()
    compile_model(counter)
    counts = []
    for n in steps:
        run(n)
        counts.append(counter.frame_count)
    return counts


@pytest.mark.parametrize("name", ["rope", "t5", pytest.param("alibi", marks=pytest.mark.slow),
                                  pytest.param("rope-dynamic-ntk", marks=pytest.mark.slow)])
def test_cached_decoding_does_not_recompile_per_token(name, gen):
    """model.compile() + generate: one prefill graph and one decoding graph, for 4 tokens as for 12."""
    model = build_decoder_only(small_config(name, num_layers=2)).eval()
    prompt = torch.randint(0, VOCAB, (2, 5), generator=gen)
    want = model.generate(prompt, max_new_tokens=12)
    got = {}
    counts = count_graphs(lambda backend: model.compile(backend=backend, fullgraph=True),
                          lambda n: got.setdefault(n, model.generate(prompt, max_new_tokens=n)), (4, 12))
    assert counts == [2, 2], f"graphs after 4 and 12 tokens: {counts} (prefill + one decoding graph expected)"
    assert torch.equal(got[12], want) and torch.equal(got[4], want[:, : 5 + 4])


def test_cached_encoder_decoder_decoding_does_not_recompile_per_token(gen):
    """generate calls encode and decode: compiled, the graph count does not grow with the number of tokens."""
    model = build_encoder_decoder(small_config("rope")).eval()
    src = torch.randint(0, VOCAB, (2, 7), generator=gen)
    want = model.generate(src, bos_id=1, max_new_tokens=10)
    got = {}

    def compile_model(backend) -> None:
        model.encode = torch.compile(model.encode, backend=backend, fullgraph=True)
        model.decode = torch.compile(model.decode, backend=backend, fullgraph=True)

    counts = count_graphs(compile_model, lambda n: got.setdefault(n, model.generate(src, bos_id=1, max_new_tokens=n)),
                          (4, 10))
    # encoder, prefill (BOS, empty caches), the step at cache length 1 (dynamo specialises sizes 0 and 1),
    # and one step graph for every longer cache
    assert counts == [4, 4], f"graphs after 4 and 10 tokens: {counts}"
    assert torch.equal(got[10], want)


# -- real compiles (inductor: C++ code generation) ------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
def test_inductor_matches_eager(name, gen):
    model, args = model_and_inputs("decoder-only", name, gen)
    assert_compiled_matches_eager(model, args, "inductor", atol=1e-4)


@pytest.mark.slow
def test_inductor_cached_decoding_matches_eager(gen):
    model = build_decoder_only(small_config("rope", num_layers=2)).eval()
    prompt = torch.randint(0, VOCAB, (2, 5), generator=gen)
    want = model.generate(prompt, max_new_tokens=10)
    dynamo.reset()
    model.compile(fullgraph=True)
    assert torch.equal(model.generate(prompt, max_new_tokens=10), want)


# -- Llama-family models ---------------------------------------------------------------------------------
def small_llama(name: str = "rope"):
    llama = pytest.importorskip("posenc.models.decoder")
    cfg = llama.DecoderConfig(vocab_size=VOCAB, dim=32, num_layers=2, num_heads=4, num_kv_heads=2, ffn_dim=64,
                            position=name)
    return llama.build_decoder(cfg).eval()


@pytest.mark.parametrize("name", ["rope", "rope-llama3", "rope-yarn", pytest.param("alibi", marks=pytest.mark.slow)])
def test_llama_compiles_to_one_graph(name, gen):
    """Grouped-query Decoder: fullgraph forward and backward, compiled == eager."""
    model = small_llama(name)
    assert_compiled_matches_eager(model, (torch.randint(0, VOCAB, (2, 8), generator=gen),), "eager")


def test_llama_cached_decoding_does_not_recompile_per_token(gen):
    """Decoder.generate calls hidden(): compiled, the graph count does not grow with the number of tokens."""
    model = small_llama()
    prompt = torch.randint(0, VOCAB, (2, 5), generator=gen)
    want = model.generate(prompt, 12)
    got = {}

    def compile_model(backend) -> None:
        model.hidden = torch.compile(model.hidden, backend=backend, fullgraph=True)

    counts = count_graphs(compile_model, lambda n: got.setdefault(n, model.generate(prompt, n)), (4, 12))
    assert counts == [2, 2], f"graphs after 4 and 12 tokens: {counts} (prefill + one decoding graph expected)"
    assert torch.equal(got[12], want)


# -- no host sync on CUDA --------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (sync debug mode)")
@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "learned"])
def test_compiled_forward_has_no_host_sync_on_cuda(name, gen):
    model, args = model_and_inputs("decoder-only", name, gen)
    model, args = model.cuda(), tuple(a.cuda() for a in args)
    dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    compiled(*args)  # compile (and its own syncs) outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = compiled(*args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(out, model(*args), atol=1e-4, rtol=1e-4)
