"""posenc's compiled decoding kernel (``posenc.kernels``): its layouts, its 8-bit activations, and its
products against a float64 reference written here from the formula, on fresh random shapes and integers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posenc import kernels
from posenc.models.quant import GroupQuant, QuantHead, QuantLinear, quantise_groups

module = kernels.load()
needs_kernel = pytest.mark.skipif(module is None, reason=f"posenc's kernel is not built here: {kernels.status()}")


def random_groups(gen: torch.Generator, n: int, k: int, bits: int, *, half: bool = False) -> GroupQuant:
    scale = torch.rand(n, k // 32, generator=gen) * 0.02 + 1e-4
    minimum = -torch.rand(n, k // 32, generator=gen) * 0.1
    if half:  # GGUF's Q4_0 / Q4_1 / Q8_0 store their factors as float16
        scale, minimum = scale.half().float(), minimum.half().float()
    return GroupQuant(torch.randint(0, 2**bits, (n, k), generator=gen).to(torch.uint8), scale, minimum, bits)


def reference_activations(x: torch.Tensor):
    """The kernel's 8-bit rounding, written independently: per 32 inputs d = max|x| / 127 (float32),
    q = round-half-even(x · (1 / d)), 0 where d is 0; and the rounded group's sum d · Σ q."""
    g = x.view(x.shape[0], -1, 32)
    d = g.abs().amax(-1) / 127
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    q = (g * inv[..., None]).round()
    return q.to(torch.int8).view_as(x), d, d.double() * q.double().sum(-1)


def centre(bits: int) -> int:
    """c: the kernel holds q − c (0 for ≤ 4 bits, 2^(bits−1) above: signed bytes)."""
    return 0 if bits <= 4 else 2 ** (bits - 1)


def reference(x: torch.Tensor, gq: GroupQuant) -> torch.Tensor:
    """Σ_g scale · d · Σ (q − c) · qx + (minimum + c · scale) · Σ x in float64: what the kernel computes,
    without its float32 sums."""
    qx, d, sx = reference_activations(x)
    m, k = x.shape
    c = centre(gq.bits)
    dots = torch.einsum("ngi,mgi->mng", gq.values.view(-1, k // 32, 32).double() - c, qx.view(m, -1, 32).double())
    return (dots * gq.scale.double() * d.double()[:, None]).sum(-1) + sx @ (gq.minimum.double()
                                                                           + c * gq.scale.double()).T


@pytest.mark.parametrize("bits", range(1, 9))
def test_layouts_round_trip(bits: int, gen: torch.Generator) -> None:
    n, k = int(torch.randint(1, 40, (1,), generator=gen)), 32 * int(torch.randint(1, 6, (1,), generator=gen))
    gq = random_groups(gen, n, k, bits)
    w = kernels.pack(gq.values, bits)
    assert w.shape == ((n, k // 2) if bits <= 4 else (n, k)) and w.dtype == (torch.uint8 if bits <= 4 else torch.int8)
    assert torch.equal(kernels.unpack(w, bits), gq.values)
    if bits <= 4:  # llama.cpp's Q4 order: byte j of a group holds inputs j (low nibble) and j + 16 (high)
        assert torch.equal(w.view(n, -1, 16) & 15, gq.values.view(n, -1, 32)[..., :16])
        assert torch.equal(w.view(n, -1, 16) >> 4, gq.values.view(n, -1, 32)[..., 16:])


def test_scales_are_float16_only_when_exact(gen: torch.Generator) -> None:
    gq = random_groups(gen, 8, 64, 4)
    for scale, minimum, dtype in ((gq.scale.half().float(), gq.minimum.half().float(), torch.int16),
                                  (gq.scale, gq.minimum, torch.int32)):
        packed = kernels.pack_scales(scale, minimum)
        assert packed.dtype == dtype and packed.shape == (8, 2, 2)
        back = kernels.unpack_scales(packed, 4)
        assert torch.equal(back[0], scale) and torch.equal(back[1], minimum)


@needs_kernel
def test_activations_are_rounded_as_written(level: int, gen: torch.Generator) -> None:
    """Each path's rounding of the activations (AVX-512's vectorised one included) gives the same integers."""
    x = torch.randn(5, 160, generator=gen) * torch.rand(5, 160, generator=gen) * 3
    x[2, 32:64] = 0  # a group of zeros: d = 0, q = 0
    qx, d, sx = module.quantise(x)
    rq, rd, rs = reference_activations(x)
    assert torch.equal(qx, rq) and torch.equal(d, rd)
    torch.testing.assert_close(sx.double(), rs, rtol=1e-6, atol=1e-6)
    assert int(qx.abs().max()) == 127 and torch.equal(qx[2, 32:64], torch.zeros(32, dtype=torch.int8))


def widest_level() -> int:
    before = module.set_level(99)
    best = module.get_level()
    module.set_level(before)
    return best


@pytest.fixture(params=[0, 1, 2], ids=lambda k: kernels.LEVELS[k].replace(" ", "-"))
def level(request):
    """Each of the kernel's paths this machine can run (the others skip, naming the CPU's widest)."""
    if module is None:
        pytest.skip("posenc's kernel is not built here")
    if request.param > widest_level():
        pytest.skip(f"this CPU's widest path is {kernels.LEVELS[widest_level()]}")
    before = module.set_level(request.param)
    yield request.param
    module.set_level(before)


@needs_kernel
@pytest.mark.parametrize("bits", [2, 4, 5, 6, 8])
@pytest.mark.parametrize("half", [True, False])
def test_kernel_equals_the_formula(bits: int, half: bool, level: int, gen: torch.Generator) -> None:
    """Every output of the kernel, on each of its paths (N not a multiple of its 4-row blocks, M of its blocks of
    four inputs: the tail loops run too; K an odd or even number of groups: the AVX-512 path's odd last group too) against the float64
    formula; then against the exact product, within the bound the 8-bit activations set."""
    assert module.get_level() == level
    n = 4 * int(torch.randint(1, 20, (1,), generator=gen)) + int(torch.randint(1, 4, (1,), generator=gen))
    # m: one row (decoding) to a few blocks of four (the AVX-512 path's 4 × 4 blocks, and the rows left over)
    k, m = 32 * int(torch.randint(1, 12, (1,), generator=gen)), int(torch.randint(1, 14, (1,), generator=gen))
    gq = random_groups(gen, n, k, bits, half=half)
    x = torch.randn(m, k, generator=gen)
    out = module.matvec(x, kernels.pack(gq.values, bits), kernels.pack_scales(gq.scale, gq.minimum), bits)
    assert out.shape == (m, n) and out.dtype == torch.float32
    ref = reference(x, gq)
    size = (x.abs().double() @ gq.dequantize().abs().double().T)  # the size of the terms summed
    assert ((out.double() - ref).abs() <= 1e-5 * size + 1e-6).all()
    # it is the exact weight times the rounded activations, each within d/2: |Δ| ≤ Σ_g d/2 · Σ |w|
    qx, d, _ = reference_activations(x)
    rounded = (qx.view(m, -1, 32).double() * d.double()[..., None]).view(m, k)
    w = gq.dequantize().double()
    torch.testing.assert_close(out.double(), rounded @ w.T, rtol=1e-5, atol=1e-5 * float(size.max()))
    bound = torch.einsum("mg,ng->mn", d.double() / 2, w.abs().view(n, -1, 32).sum(-1))
    exact = x.double() @ w.T
    assert ((out.double() - exact).abs() <= bound * (1 + 1e-5) + 1e-5 * size + 1e-6).all()


def symmetric16(gen: torch.Generator, n: int, k: int, bits: int) -> GroupQuant:
    """A symmetric weight in groups of 16 as GGUF's Q6_K holds it: scale = d · sc (float16 × int8), minimum
    = −2^(bits−1) · scale."""
    d = (torch.rand(n, k // 256 + 1, 1, generator=gen) * 0.01).half().float()
    sc = torch.randint(-128, 128, (n, k // 256 + 1, 16), generator=gen).float()
    scale = (d * sc).view(n, -1)[:, : k // 16].contiguous()
    q = torch.randint(0, 2**bits, (n, k), generator=gen).to(torch.uint8)
    return GroupQuant(q, scale, scale * -float(2 ** (bits - 1)), bits, 16)


@needs_kernel
@pytest.mark.parametrize("bits", [5, 6, 8])
def test_kernel_equals_the_formula_in_groups_of_16(bits: int, level: int, gen: torch.Generator) -> None:
    """Q6_K's layout (symmetric, a scale per 16 inputs, the activations still rounded per 32): every output on
    each path against the float64 formula, and the exact weight times the rounded activations; K an odd or even
    number of 32-groups, N and M not multiples of four."""
    n = 4 * int(torch.randint(1, 20, (1,), generator=gen)) + int(torch.randint(1, 4, (1,), generator=gen))
    k, m = 32 * int(torch.randint(1, 12, (1,), generator=gen)), int(torch.randint(1, 9, (1,), generator=gen))
    gq = symmetric16(gen, n, k, bits)
    x = torch.randn(m, k, generator=gen)
    out = module.matvec(x, kernels.pack(gq.values, bits), kernels.pack_scales16(gq.scale), bits)
    assert out.shape == (m, n) and out.dtype == torch.float32
    qx, d, _ = reference_activations(x)
    c = centre(bits)
    dots = torch.einsum("ngi,mgi->mng", gq.values.view(n, -1, 16).double() - c, qx.view(m, -1, 16).double())
    ref = (dots * gq.scale.double() * d.double().repeat_interleave(2, 1)[:, None]).sum(-1)
    w = gq.dequantize().double()
    size = x.abs().double() @ w.abs().T
    assert ((out.double() - ref).abs() <= 1e-5 * size + 1e-6).all()
    rounded = (qx.view(m, -1, 32).double() * d.double()[..., None]).view(m, k)
    torch.testing.assert_close(out.double(), rounded @ w.T, rtol=1e-5, atol=1e-5 * float(size.max()))
    # a wrong pairing of scales to groups (each 32-group's two scales swapped) is caught by the reference
    swapped = gq.scale.view(n, -1, 2).flip(-1).reshape(n, -1).contiguous()
    wrong = module.matvec(x, kernels.pack(gq.values, bits), kernels.pack_scales16(swapped), bits)
    assert not torch.allclose(wrong.double(), ref, rtol=1e-3, atol=1e-3)


@needs_kernel
@pytest.mark.parametrize(("bits", "layout"), [(b, lay) for b in (2, 4, 5, 6, 8) for lay in
                                              ("float16 pairs", "float32 pairs", "groups of 16")
                                              if lay != "groups of 16" or b > 4])  # groups of 16: 5–8 bits
def test_dequantise_equals_the_groups_on_every_path(bits: int, layout: str, level: int, gen: torch.Generator) -> None:
    """kernels.dequantise (the weight of every long product) is GroupQuant.dequantize of what was packed — a
    multiply, then an add, per value — bit for bit on each path, any rows; and its bfloat16 form is that
    float32 matrix rounded by torch (nearest even)."""
    n, k = int(torch.randint(1, 40, (1,), generator=gen)), 32 * int(torch.randint(1, 12, (1,), generator=gen))
    if layout == "groups of 16":
        gq = symmetric16(gen, n, k, bits)
        packed, scales = kernels.pack(gq.values, bits), kernels.pack_scales16(gq.scale)
    else:
        gq = random_groups(gen, n, k, bits, half=layout == "float16 pairs")
        packed, scales = kernels.pack(gq.values, bits), kernels.pack_scales(gq.scale, gq.minimum)
    assert (scales.dtype == torch.int16) == (layout == "float16 pairs")
    ref = gq.dequantize()
    start = int(torch.randint(0, n, (1,), generator=gen))
    stop = int(torch.randint(start, n + 1, (1,), generator=gen))
    assert torch.equal(kernels.dequantise(packed, scales, bits, start, stop), ref[start:stop])
    assert torch.equal(kernels.dequantise(packed, scales, bits, 0, n, torch.bfloat16), ref.bfloat16())


@needs_kernel
def test_quant_linear_holds_groups_of_16(gen: torch.Generator) -> None:
    """A Q6_K-like matrix on the kernel: re-decoded exactly for BLAS and for exact_weight; asymmetric groups of 16,
    or 4-bit ones, refused with the reason."""
    gq = symmetric16(gen, 40, 512, 6)
    layer = QuantLinear.from_groups(gq)
    assert layer.kernel == "posenc" and layer.group == 16 and "groups of 16" in repr(layer)
    assert layer.qscales.shape == (40, 32) and layer.qweight.dtype == torch.int8
    assert torch.equal(layer.exact_weight(), gq.dequantize())
    many = torch.randn(layer.blas_rows, 512, generator=gen)
    torch.testing.assert_close(layer(many), F.linear(many, gq.dequantize()), rtol=1e-5, atol=1e-5)
    x = torch.randn(1, 1, 512, generator=gen)
    torch.testing.assert_close(layer(x), F.linear(x, gq.dequantize()), rtol=0.05, atol=0.05 * float(
        F.linear(x.abs(), gq.dequantize().abs()).max()))
    head = QuantHead.of(layer, tied=True)
    assert torch.equal(head(x), layer(x))
    skewed = GroupQuant(gq.values, gq.scale, gq.minimum + 1e-3, 6, 16)
    with pytest.raises(ValueError, match="symmetric"):
        QuantLinear.from_groups(skewed)
    with pytest.raises(ValueError, match="symmetric"):
        QuantLinear.from_groups(GroupQuant(gq.values & 15, gq.scale, gq.scale * -8.0, 4, 16))


@needs_kernel
def test_quant_linear_on_the_kernel_and_on_blas(gen: torch.Generator) -> None:
    """Few rows through the kernel, many through BLAS on the weight it re-decodes from its own layout (exact);
    a bias, batch shapes, a bfloat16 model, the head made from it, and torch.compile in one graph."""
    w, b = torch.randn(72, 96, generator=gen), torch.randn(72, generator=gen)
    gq = quantise_groups(w)
    layer = QuantLinear.from_groups(gq, bias=b)
    assert layer.kernel == "posenc" and "posenc kernel, 4-bit" in repr(layer)
    assert torch.equal(layer.exact_weight(), gq.dequantize())
    x = torch.randn(2, 3, 96, generator=gen)
    torch.testing.assert_close(layer(x).double(), reference(x.view(6, 96), gq).view(2, 3, 72) + b.double(),
                               rtol=1e-5, atol=1e-5)
    many = torch.randn(layer.blas_rows, 96, generator=gen)
    torch.testing.assert_close(layer(many), F.linear(many, gq.dequantize(), b), rtol=1e-5, atol=1e-5)
    head = QuantHead.of(layer, tied=False)
    assert torch.equal(head(x), layer(x)) and head.weight.shape == (72, 96)
    layer.to(torch.bfloat16)  # the layout is integers: untouched; the activations come back in bfloat16
    assert layer(x.bfloat16()).dtype == torch.bfloat16 and torch.equal(layer.exact_weight(), gq.dequantize())
    layer.float()
    compiled = torch.compile(layer, fullgraph=True)
    torch.testing.assert_close(compiled(x), layer(x), rtol=0, atol=0)


def test_switched_off_falls_back_to_torch_with_the_reason(monkeypatch, gen: torch.Generator) -> None:
    monkeypatch.setattr(kernels, "_STATE", {})
    monkeypatch.setenv("POSENC_KERNELS", "0")
    assert kernels.load() is None and "POSENC_KERNELS=0" in kernels.status()
    layer = QuantLinear.from_groups(random_groups(gen, 32, 64, 4))
    assert layer.kernel == "int4"
    with pytest.raises(ValueError, match="POSENC_KERNELS=0"):
        QuantLinear.from_groups(random_groups(gen, 32, 64, 4), kernel="posenc")


@needs_kernel
def test_the_kernel_refuses_wrong_layouts(gen: torch.Generator) -> None:
    gq = random_groups(gen, 8, 64, 4)
    w, sc = kernels.pack(gq.values, 4), kernels.pack_scales(gq.scale, gq.minimum)
    x = torch.randn(1, 64, generator=gen)
    with pytest.raises(RuntimeError, match="float32"):
        module.matvec(x.double(), w, sc, 4)
    with pytest.raises(RuntimeError, match="int8"):
        module.matvec(x, w, sc, 8)  # a 4-bit layout called as 8-bit
    with pytest.raises(RuntimeError, match="multiple of 32"):
        module.matvec(torch.randn(1, 48), w, sc, 4)
    with pytest.raises(RuntimeError, match=r"\(N, K/32, 2\)"):
        module.matvec(x, w, sc[:, :1].contiguous(), 4)
    with pytest.raises(RuntimeError, match="bits"):
        module.matvec(x, w, sc, 9)


@needs_kernel
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("per_sequence", [False, True])
def test_rope_equals_the_reference_bit_for_bit(pairing: str, per_sequence: bool, gen: torch.Generator) -> None:
    from posenc.positions.rotary import apply_rotary

    b, h, t = (int(v) for v in torch.randint(1, 5, (3,), generator=gen))
    dh = 2 * int(torch.randint(1, 40, (1,), generator=gen))
    x = torch.randn(b, h, t, dh, generator=gen) * 10
    angles = torch.rand((b, 1, t, dh // 2) if per_sequence else (t, dh // 2), generator=gen) * 100
    cos, sin = angles.cos(), angles.sin()
    assert torch.equal(module.rope(x, cos, sin, pairing == "half"), apply_rotary(x, cos, sin, pairing=pairing))
    if not per_sequence:
        flat = x[0, 0]  # (T, Dh)
        assert torch.equal(module.rope(flat.contiguous(), cos, sin, pairing == "half"),
                           apply_rotary(flat, cos, sin, pairing=pairing))


@needs_kernel
def test_rms_norm_equals_the_reference(gen: torch.Generator) -> None:
    """The decoding step's RMSNorm against F.rms_norm then the gain, summed in another order: within 4 ulp
    (2,000 seeds: at most 2 ulp where torch sums in 8 lanes (AVX2), 3.1 where it sums in 16 (AVX-512))."""
    d = int(torch.randint(1, 700, (1,), generator=gen))
    x, w = torch.randn(3, 2, d, generator=gen) * 7, torch.randn(d, generator=gen)
    ref = w * F.rms_norm(x, (d,), eps=1e-6)
    torch.testing.assert_close(module.rms_norm(x, w, 1e-6), ref, rtol=4 * 2**-23, atol=1e-7)
    with pytest.raises(RuntimeError, match="weight"):
        module.rms_norm(x, w[:-1].contiguous() if d > 1 else torch.ones(2), 1e-6)


@needs_kernel
@pytest.mark.parametrize("norm", ["rms", "rms-offset"])
def test_norm_modules_take_the_kernel_at_any_size(norm: str, monkeypatch, gen: torch.Generator) -> None:
    """Llama's and Gemma's RMSNorm with the kernel loaded (a quantised model's prefill of thousands of rows, rows
    split between threads) against their own torch path: within 4 ulp, and the same bits at 1 and 2 threads
    (each row summed in one order whatever the split)."""
    from posenc.models import decoder_parts
    from posenc.models.decoder_parts import NORMS

    d = int(torch.randint(16, 700, (1,), generator=gen))
    rows = int(torch.randint(1, 3000, (1,), generator=gen))
    layer = NORMS[norm](d)
    with torch.no_grad():
        layer.weight.normal_(generator=gen)
    x = torch.randn(1, rows, d, generator=gen) * 5
    monkeypatch.setattr(decoder_parts.kernels, "loaded", lambda: None)
    with torch.no_grad():
        ref = layer(x)
    monkeypatch.setattr(decoder_parts.kernels, "loaded", lambda: module)
    threads = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2):
            torch.set_num_threads(n)
            with torch.no_grad():
                outs.append(layer(x))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(outs[0], ref, rtol=4 * 2**-23, atol=1e-6)
    assert layer(x).requires_grad  # training keeps torch's path (autograd)


@needs_kernel
def test_bfloat16_rows_go_to_the_matrix_units_only_where_the_cpu_has_them(monkeypatch, gen: torch.Generator) -> None:
    """With AMX, bfloat16 inputs of AMX_BF16_BLAS_ROWS rows or more multiply the re-decoded weight cast to
    bfloat16 (bit-equal to F.linear on it), fewer go to the kernel; float32 inputs in the kernel's band do the
    same, their output back in float32 (unless AMX_FLOAT32_BAND is off); CPUs without AMX keep the kernel up to
    blas_rows, and past it every input multiplies the exact float32 weight."""
    from posenc.models import quant

    w = torch.randn(40, 128, generator=gen)
    gq = quantise_groups(w)
    layer = QuantLinear.from_groups(gq)
    layer.blas_rows = 4096  # the AVX-512 kernel's threshold (AMX CPUs have AVX-512), whatever path is built here
    rows = quant.AMX_BF16_BLAS_ROWS
    many = torch.randn(rows, 128, generator=gen).bfloat16()
    few = many[: rows - 1]
    on_units = F.linear(many, gq.dequantize().bfloat16())
    kernel_f32 = lambda x: layer._matvec(x.float().contiguous(), layer.qweight, layer.qscales, layer.bits,  # noqa: E731
                                         None)
    on_kernel = lambda x: kernel_f32(x).bfloat16()  # noqa: E731
    monkeypatch.setattr(quant, "AMX_BF16", True)
    assert torch.equal(layer(many), on_units)
    assert torch.equal(layer(few), on_kernel(few))
    monkeypatch.setattr(quant, "AMX_FLOAT32_BAND", True)
    assert layer(many.float()).dtype == torch.float32 and torch.equal(layer(many.float()), on_units.float())
    assert torch.equal(layer(few.float()), kernel_f32(few))
    layer.blas_rows = rows  # past the band: float32 inputs multiply the exact float32 weight
    assert torch.equal(layer(many.float()), F.linear(many.float(), gq.dequantize()))
    layer.blas_rows = 4096
    monkeypatch.setattr(quant, "AMX_FLOAT32_BAND", False)
    assert torch.equal(layer(many.float()), kernel_f32(many))  # the band switched off: the kernel
    monkeypatch.setattr(quant, "AMX_FLOAT32_BAND", True)
    monkeypatch.setattr(quant, "AMX_BF16", False)
    assert torch.equal(layer(many.float()), kernel_f32(many))
    assert torch.equal(layer(many), on_kernel(many))
    assert not torch.equal(on_kernel(many), on_units)  # the two routes differ: the test can tell them apart
    exact = F.linear(many.double(), gq.dequantize().double())
    for got in (on_units, on_kernel(many)):  # both close to the float64 product
        torch.testing.assert_close(got.double(), exact, rtol=0.05, atol=0.05 * float(exact.abs().max()))


@needs_kernel
def test_a_loss_head_over_chunks_is_routed_as_its_whole_pass(gen: torch.Generator) -> None:
    """The extension loss hands a stored head its pass in chunks: with pass_rows at or past the threshold every
    chunk multiplies the exact weight (equal to the float reference, as the body's layers did), below it the
    kernel — the same as calling the head on the chunk."""
    from posenc.extend.loss import _chunked_nll

    gq = quantise_groups(torch.randn(50, 64, generator=gen))
    head = QuantLinear.from_groups(gq)
    head.blas_rows = 16
    hidden, targets = torch.randn(20, 64, generator=gen), torch.randint(0, 50, (20,), generator=gen)
    exact = F.cross_entropy(F.linear(hidden.double(), gq.dequantize().double()), targets, reduction="none")
    long_pass = _chunked_nll(head, hidden, targets, 4, pass_rows=21)
    torch.testing.assert_close(long_pass.double(), exact, rtol=1e-5, atol=1e-5)  # float32 sums vs float64
    short_pass = _chunked_nll(head, hidden, targets, 4, pass_rows=10)
    by_chunk = torch.cat([F.cross_entropy(head(hidden[s:s + 4]), targets[s:s + 4], reduction="none")
                          for s in range(0, 20, 4)])
    assert torch.equal(short_pass, by_chunk)
    assert not torch.allclose(short_pass.double(), exact, rtol=1e-5, atol=1e-5)  # the routes differ
    assert torch.equal(head(hidden[:4], pass_rows=21), head._exact_product(hidden[:4]))
