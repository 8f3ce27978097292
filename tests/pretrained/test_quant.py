"""Quantised weights as stored: GGUF blocks → GroupQuant (exact), QuantLinear (= F.linear with its weight),
and whole tiny models loaded as-stored / int8 / int4 against the dequantised float32 model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gguf_helpers import gguf, tiny_llama, tokenizer_fields, train_tokenizer, write_gguf
from posenc.formats.gguf import BLOCK_BYTES, GROUP16_TYPES, GROUP_TYPES, decode_groups, dequantize, open_gguf, raw_blocks
from posenc import kernels
from posenc.models.quant import (DEQUANTISE_ROWS, GroupQuant, QuantLinear, int8_rows, kernel_blas_rows, kernel_weight,
                                 quantise_groups)
from posenc.pretrained import load_pretrained
from posenc.pretrained.as_stored import check_weights

#: Where each block type keeps its float16 factors (the rest of a random block is any bytes).
FP16_AT = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q5_K": [0, 2],
           "Q6_K": [208]}
#: bfloat16's unit round-off: the kernels see activations, scales and zero points in bfloat16.
BF16 = 2.0**-8


def write_one(path: Path, raw: np.ndarray, kind: str) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("w", raw, raw_dtype=gguf.GGMLQuantizationType[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def random_blocks(kind: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random stored blocks of ``kind`` with finite float16 factors: every integer pattern appears."""
    size, per = BLOCK_BYTES[kind]
    raw = rng.integers(0, 256, size=(rows * cols // per, size), dtype=np.uint8)
    for at in FP16_AT[kind]:
        raw[:, at : at + 2] = rng.uniform(-1, 1, size=(len(raw), 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


def stored_groups(tmp_path: Path, kind: str, seed: int, rows: int = 32, cols: int = 512):
    path = write_one(tmp_path / "t.gguf", random_blocks(kind, rows, cols, np.random.default_rng(seed)), kind)
    (t,) = open_gguf(path).tensors
    q, scale, minimum, bits = decode_groups(raw_blocks(t), kind)
    return GroupQuant(q, scale, minimum, bits, q.shape[1] // scale.shape[1]), torch.from_numpy(dequantize(t, path))


@pytest.mark.parametrize("kind", sorted(GROUP_TYPES) + sorted(GROUP16_TYPES))
def test_groups_dequantise_to_read_gguf_exactly(tmp_path: Path, kind: str, seed: int) -> None:
    gq, ref = stored_groups(tmp_path, kind, seed)
    assert gq.bits == {**GROUP_TYPES, **GROUP16_TYPES}[kind] and int(gq.values.max()) < 2**gq.bits
    assert gq.group == (16 if kind in GROUP16_TYPES else 32)
    assert int(gq.values.max()) == 2**gq.bits - 1  # random bytes reach the top value: no bit is dropped
    assert torch.equal(gq.dequantize(), ref)  # bit for bit


@pytest.mark.skipif(kernels.load() is None, reason=f"posenc's kernel is not built here: {kernels.status()}")
@pytest.mark.parametrize("kind", sorted(GROUP_TYPES) + sorted(GROUP16_TYPES))
def test_the_kernel_layout_dequantises_to_read_gguf_exactly(tmp_path: Path, kind: str, seed: int) -> None:
    """A stored matrix as posenc's kernel holds it, decoded back by the compiled ``kernels.dequantise`` (the
    weight of every long product): ``read_gguf``'s float32 tensor bit for bit, any row range, and its bfloat16
    rounding."""
    gq, ref = stored_groups(tmp_path, kind, seed, rows=37)
    layer = QuantLinear.from_groups(gq, kernel="posenc")
    start, stop = sorted(int(v) for v in torch.randint(0, 38, (2,)))
    got = kernels.dequantise(layer.qweight, layer.qscales, layer.bits, start, stop)
    assert got.dtype == torch.float32 and torch.equal(got, ref[start:stop])
    whole = kernels.dequantise(layer.qweight, layer.qscales, layer.bits, 0, 37, torch.bfloat16)
    assert torch.equal(whole, ref.bfloat16())
    with pytest.raises(RuntimeError, match=r"rows \[30, 40\) outside the weight's 37 rows"):
        kernels.dequantise(layer.qweight, layer.qscales, layer.bits, 30, 40)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q5_0", "Q8_0"])
def test_groups_of_quantised_floats_exact(tmp_path: Path, kind: str, gen: torch.Generator) -> None:
    """Blocks written by gguf's own quantiser (realistic scales), not only random bytes."""
    x = (torch.randn(32, 256, generator=gen) * 2).numpy()
    path = write_one(tmp_path / "t.gguf", gguf.quants.quantize(x, gguf.GGMLQuantizationType[kind]), kind)
    (t,) = open_gguf(path).tensors
    assert torch.equal(GroupQuant(*decode_groups(raw_blocks(t), kind)).dequantize(),
                       torch.from_numpy(dequantize(t, path)))


@pytest.mark.parametrize("kind", sorted(GROUP_TYPES))
def test_int4_kernel_equals_linear_with_its_weight(tmp_path: Path, kind: str, seed: int,
                                                   gen: torch.Generator) -> None:
    """PyTorch's int4 kernel (the fallback where posenc's kernel is not built)."""
    gq, exact = stored_groups(tmp_path, kind, seed)
    layer = QuantLinear.from_groups(gq, kernel="int4")
    assert layer.planes == (1 if gq.bits <= 4 else 2)
    x = torch.randn(5, gq.shape[1], generator=gen)
    out = layer(x)
    assert out.shape == (5, gq.shape[0]) and out.dtype == torch.float32
    ref = F.linear(x.to(torch.bfloat16).float(), kernel_weight(gq))  # what the kernel is given
    scale = F.linear(x.abs(), exact.abs())  # the size of the terms summed: bounds the rounding
    assert ((out - ref).abs() <= 2 * BF16 * scale + 1e-6).all()
    # the bfloat16 scales and zero points stay within bfloat16 rounding of the stored weight
    assert ((kernel_weight(gq) - exact).abs() <= 2 * BF16 * (exact.abs() + gq.scale.abs().repeat_interleave(32, 1)
                                                              * 2**gq.bits)).all()


def test_long_inputs_use_the_exact_weight(tmp_path: Path, seed: int, gen: torch.Generator) -> None:
    gq, exact = stored_groups(tmp_path, "Q4_K", seed)
    for kernel in ("int4", "posenc"):
        layer = QuantLinear.from_groups(gq, exact=lambda: gq, kernel=kernel)
        assert layer.blas_rows == (DEQUANTISE_ROWS if kernel == "int4" else kernel_blas_rows())
        x = torch.randn(layer.blas_rows, gq.shape[1], generator=gen)
        torch.testing.assert_close(layer(x), F.linear(x, exact), rtol=1e-5, atol=1e-5)
        assert torch.equal(layer.exact_weight(), exact)
        short = layer(x[:3])
        assert not torch.equal(short, F.linear(x[:3], exact))  # the kernel path: not exact


def test_the_kernel_hands_long_inputs_to_blas_by_path_and_vendor(monkeypatch) -> None:
    """The crossover is the kernel path's, lower on Intel's AVX-512 CPUs (MKL's own AVX-512 GEMM); the
    environment sets it, and a malformed setting is refused by name."""
    import posenc.models.quant as quant

    class Kernel:
        def __init__(self, level: int) -> None:
            self.level = level

        def get_level(self) -> int:
            return self.level

    monkeypatch.delenv("POSENC_BLAS_ROWS", raising=False)
    for level in (0, 1, 2):
        for vendor in ("GenuineIntel", "AuthenticAMD", ""):
            monkeypatch.setattr(quant.kernels, "loaded", lambda level=level: Kernel(level))
            monkeypatch.setattr(quant.kernels, "cpu_vendor", lambda vendor=vendor: vendor)
            want = (quant.INTEL_AVX512_BLAS_ROWS if (level, vendor) == (2, "GenuineIntel")
                    else quant.KERNEL_BLAS_ROWS_BY_LEVEL[level])
            assert quant.kernel_blas_rows() == want
    assert quant.INTEL_AVX512_BLAS_ROWS < quant.KERNEL_BLAS_ROWS_BY_LEVEL[2]
    monkeypatch.setattr(quant.kernels, "loaded", lambda: None)
    assert quant.kernel_blas_rows() == quant.KERNEL_BLAS_ROWS
    monkeypatch.setenv("POSENC_BLAS_ROWS", "17")
    assert quant.kernel_blas_rows() == 17
    for bad in ("0", "-3", "many", "1.5"):
        monkeypatch.setenv("POSENC_BLAS_ROWS", bad)
        with pytest.raises(ValueError, match=f"POSENC_BLAS_ROWS.*{bad}"):
            quant.kernel_blas_rows()


def test_a_tall_weight_is_re_decoded_in_blocks(tmp_path: Path, seed: int, gen: torch.Generator, monkeypatch) -> None:
    """Output rows re-decoded EXACT_ROWS at a time (a 262k-row head never whole in float32): the same product."""
    import posenc.models.quant as quant

    gq, exact = stored_groups(tmp_path, "Q4_K", seed)  # 32 rows
    monkeypatch.setattr(quant, "EXACT_ROWS", 5)  # blocks of 5: six whole, one of 2
    decoded = []
    real, real_kernel = GroupQuant.dequantize, kernels.dequantise
    monkeypatch.setattr(GroupQuant, "dequantize", lambda self: decoded.append(self.shape[0]) or real(self))
    monkeypatch.setattr(kernels, "dequantise", lambda w, s, b, start, stop, dtype=None:
                        decoded.append(stop - start) or real_kernel(w, s, b, start, stop, dtype))
    for kernel in ("int4", "posenc") if kernels.load() is not None else ("int4",):
        layer = QuantLinear.from_groups(gq, exact=lambda: gq, kernel=kernel)
        x = torch.randn(layer.blas_rows + 7, gq.shape[1], generator=gen)
        want = x.double() @ exact.double().T  # each block its own BLAS call: float32 sums in another order
        decoded.clear()
        torch.testing.assert_close(layer(x).double(), want, rtol=1e-5, atol=1e-6 * float(want.abs().max()))
        assert decoded == [5] * 6 + [2], kernel


def test_batch_shapes_and_bias(gen: torch.Generator) -> None:
    w, b = torch.randn(48, 64, generator=gen), torch.randn(48, generator=gen)
    layer = QuantLinear.from_groups(quantise_groups(w), bias=b, kernel="int4")
    x = torch.randn(2, 3, 64, generator=gen)
    ref = F.linear(x.to(torch.bfloat16).float(), kernel_weight(quantise_groups(w)), b)
    torch.testing.assert_close(layer(x), ref, rtol=4 * BF16, atol=4 * BF16)


def test_int4_quantisation_within_one_step(gen: torch.Generator) -> None:
    w = torch.randn(32, 128, generator=gen)
    gq = quantise_groups(w)
    step = gq.scale.repeat_interleave(32, 1)
    assert ((gq.dequantize() - w).abs() <= step / 2 + 1e-6).all()


def test_int8_rows_layer(gen: torch.Generator) -> None:
    w = torch.randn(32, 64, generator=gen)
    q, scale = int8_rows(w)
    assert ((q.float() * scale[:, None] - w).abs() <= scale[:, None] / 2 + 1e-6).all()
    layer = QuantLinear.from_int8_rows(w)
    x = torch.randn(4, 64, generator=gen)
    ref = F.linear(x.to(torch.bfloat16).float(), q.float() * scale.to(torch.bfloat16).float()[:, None])
    torch.testing.assert_close(layer(x), ref, rtol=4 * BF16, atol=4 * BF16 * float(ref.abs().max()))


def test_contract_errors() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        QuantLinear(in_features=4, out_features=4)
    with pytest.raises(ValueError, match="uint8"):
        GroupQuant(torch.zeros(2, 32, dtype=torch.int32), torch.ones(2, 1), torch.zeros(2, 1), 4)
    with pytest.raises(ValueError, match=r"\(3, 1\)"):
        GroupQuant(torch.zeros(3, 32, dtype=torch.uint8), torch.ones(2, 1), torch.zeros(2, 1), 4)
    with pytest.raises(ValueError, match="N divisible by 16"):
        QuantLinear.from_groups(quantise_groups(torch.randn(8, 32)), kernel="int4")
    with pytest.raises(ValueError, match="'avx'"):
        QuantLinear.from_groups(quantise_groups(torch.randn(8, 32)), kernel="avx")
    with pytest.raises(ValueError, match="'fp8'"):
        check_weights("fp8", gguf=True, device="cpu")
    with pytest.raises(ValueError, match="dequantised"):
        check_weights("int4", gguf=False, device="meta")
    assert check_weights(None, gguf=True, device="cpu") == "as-stored"
    assert check_weights(None, gguf=False, device="cpu") == "dequantised"
    with pytest.raises(ValueError, match="Q3_K"):
        decode_groups(torch.zeros(1, 110, dtype=torch.uint8), "Q3_K")


# -- whole models ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tok():
    return train_tokenizer()


def _logit_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0"])
@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_as_stored_model_close_to_dequantised(tmp_path: Path, tok, qtype: str, pairing: str, seed: int) -> None:
    hf = tiny_llama(tok.get_vocab_size(), tie=qtype == "Q8_0")
    path = write_gguf(tmp_path / "m.gguf", hf, tokenizer_fields(tok), qtype=qtype)
    stored = load_pretrained(path, pairing=pairing)
    ref = load_pretrained(path, pairing=pairing, weights="dequantised")
    assert stored.weights == "as-stored" and ref.weights == "dequantised"
    assert stored.stored["layers.0.attn.q_proj.weight"].startswith(f"{qtype} → posenc kernel" if kernels.load()
                                                                    else f"{qtype} → int4 kernel")
    assert "head" in stored.stored or "embed.weight" in stored.stored
    ids = torch.tensor([tok.encode("The quick brown fox jumps over the lazy dog.").ids])
    with torch.no_grad():
        a, b = stored.model(ids), ref.model(ids)
    assert _logit_error(a, b) < 0.05  # bfloat16 activations and scales, nothing more
    # the token table: looked up from the blocks, equal to the dequantised table
    if "embed.weight" in stored.stored:
        assert torch.equal(stored.model.embed(ids), ref.model.embed(ids))
    # cached decoding continues the same way as greedy decoding of the float model, a few tokens at least
    out = stored.model.generate(ids, 3)
    assert out.shape == (1, ids.shape[1] + 3)


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_int8_int4_opt_in(tmp_path: Path, tok, weights: str, seed: int) -> None:
    hf = tiny_llama(tok.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", hf, tokenizer_fields(tok))
    q = load_pretrained(path, weights=weights)
    ref = load_pretrained(path, weights="dequantised")
    assert q.stored["layers.0.ffn.down_proj"] == weights and q.stored["head"] == weights
    assert isinstance(q.model.layers[0].attn.q_proj, QuantLinear)
    ids = torch.tensor([tok.encode("rotary position embeddings rotate queries and keys").ids])
    with torch.no_grad():
        err = _logit_error(q.model(ids), ref.model(ids))
    assert 0 < err < (0.05 if weights == "int8" else 0.5)


def test_as_stored_load_builds_no_gguf_reader(tmp_path: Path, tok, monkeypatch, seed: int) -> None:
    """The as-stored load reads everything, the architecture included, from posenc's own memory-mapped view
    (``open_mapped``): ``gguf.GGUFReader`` (seconds for a real file's metadata) is never built, and the model
    and its logits are those of a load that did build it."""
    import posenc.formats.gguf as formats_gguf
    import posenc.pretrained as pretrained

    hf = tiny_llama(tok.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", hf, tokenizer_fields(tok))
    ids = torch.tensor([tok.encode("rotary position embeddings rotate queries and keys").ids])
    before = load_pretrained(path)

    def refuse(*args, **kwargs):
        raise AssertionError("gguf.GGUFReader built on the as-stored load")

    monkeypatch.setattr(formats_gguf, "open_gguf", refuse)
    monkeypatch.setattr(formats_gguf, "_reader_class", refuse)
    after = pretrained.load_pretrained(path)
    assert after.weights == "as-stored" and after.stored == before.stored
    with torch.no_grad():
        assert torch.equal(after.model(ids), before.model(ids))


def test_smollm2_as_stored_says_paris() -> None:
    """The real SmolLM2 Q4_1 file run as stored: same greedy answer as HF, logits near the dequantised model's."""
    from gguf_helpers import smollm2_path

    path = smollm2_path()
    pm = load_pretrained(path)
    assert pm.stored["layers.0.ffn.up_proj.weight"] == ("Q4_1 → posenc kernel, 4-bit" if kernels.load()
                                                         else "Q4_1 → int4 kernel ×1 planes")
    assert pm.stored["embed.weight"].startswith("Q8_0") and pm.model.head.tied
    ids = torch.tensor([pm.tokenizer.encode("The capital of France is")])
    out = pm.model.generate(ids, 4)
    assert pm.tokenizer.decode(out[0, ids.shape[1]:].tolist()).startswith(" Paris")


def test_extend_variant_shares_the_quantised_modules(tmp_path: Path, tok, seed: int) -> None:
    """``posenc extend`` rebuilds the model per method: the as-stored modules are shared into the variant."""
    from posenc.extend.methods import build_variant

    path = write_gguf(tmp_path / "m.gguf", tiny_llama(tok.get_vocab_size()), tokenizer_fields(tok), qtype="Q4_1")
    stored, ref = load_pretrained(path), load_pretrained(path, weights="dequantised")
    a = build_variant(stored.model, "rope-linear", factor=2.0, original_max_len=256)
    b = build_variant(ref.model, "rope-linear", factor=2.0, original_max_len=256)
    assert a.layers[1].ffn.up_proj is stored.model.layers[1].ffn.up_proj
    ids = torch.tensor([tok.encode("Attention is all you need").ids])
    with torch.no_grad():
        assert _logit_error(a(ids), b(ids)) < 0.05


@pytest.mark.parametrize("qtype", ["F32", "Q4_1", "Q8_0"])
def test_open_mapped_equals_the_gguf_reader(tmp_path: Path, tok, qtype: str) -> None:
    """posenc's own memory-mapped view: the metadata and every tensor's bytes as gguf.GGUFReader gives them."""
    from posenc.formats.gguf import open_mapped, read_metadata

    path = write_gguf(tmp_path / "m.gguf", tiny_llama(tok.get_vocab_size()), tokenizer_fields(tok), qtype=qtype)
    ours, reader = open_mapped(path), open_gguf(path)
    assert ours.metadata.keys() == read_metadata(reader).keys()
    for key, value in read_metadata(reader).items():
        assert ours.metadata[key] == pytest.approx(value) if isinstance(value, float) else ours.metadata[key] == value
    for a, b in zip(reader.tensors, ours.tensors, strict=True):
        assert (a.name, a.tensor_type, list(a.shape), a.data_offset, a.n_bytes) == \
            (b.name, b.tensor_type, list(b.shape), b.data_offset, b.n_bytes)
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape and np.array_equal(a.data, b.data)


@pytest.mark.parametrize("shape", [(32, 64), (96, 576), (64, 32), (192, 576)])
def test_uint8_packing_equals_the_op(shape: tuple[int, int], gen: torch.Generator) -> None:
    """The reshaping packer equals PyTorch's op for the row block this CPU's torch uses (32 on AVX2, 64 with
    AVX-512), which it finds by itself; rows not a multiple of that block go through the op."""
    from posenc.models.quant import _layout_block, _pack, _pack_op, _pack_uint8

    v = torch.randint(0, 16, shape, generator=gen).to(torch.uint8)
    block = _layout_block()
    assert block in (32, 64), "this torch packs int4 in a layout posenc does not know: loading falls back to the op"
    assert torch.equal(_pack(v), _pack_op(v))
    if shape[0] % block == 0:
        assert torch.equal(_pack_uint8(v, block), _pack_op(v))


@pytest.mark.skipif(kernels.load() is None, reason=f"posenc's kernel is not built here: {kernels.status()}")
@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_q4_blocks_are_read_as_the_kernel_layout(kind: str, seed: int) -> None:
    """The as-stored loader takes Q4_0 / Q4_1 nibbles straight from the blocks: equal to decoding them and
    packing the values, and the scales equal to decode_groups'."""
    from posenc.pretrained.as_stored import _stored_nibbles

    raw = torch.from_numpy(random_blocks(kind, 48, 256, np.random.default_rng(seed)))
    gq = GroupQuant(*decode_groups(raw, kind))
    nibbles, scale, minimum = _stored_nibbles(raw, kind)
    assert torch.equal(nibbles, kernels.pack(gq.values, 4))
    assert torch.equal(scale, gq.scale) and torch.equal(minimum, gq.minimum)
