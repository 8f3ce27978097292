"""Chapter source for notebooks/{ko,en}/03-relative-positions.ipynb (built by scripts/build_notebooks.py)."""

from cells import code, exercise, md, setup_cells

SLUG = "03-relative-positions"

DEMO = {}
DEMO["exercises-relative"] = [
    md(ko="""**코드로 — RoPE 의 회전**: RoPE 는 질의와 키의 짝 (x_i, x_{i+d/2}) 을 위치 m 에 비례하는 각도 m·ω_i 만큼 돌린다.
회전한 q(m)·k(n) 은 m − n 에만 달려 있다 — 상대 위치. 직접 쓴 회전과 posenc 의 `positions.build("rope", …)` 를 비교한다.""",
       en="""**As code — RoPE's rotation**: RoPE turns each pair (x_i, x_{i+d/2}) of a query or key by the angle m·ω_i,
proportional to its position m. The rotated q(m)·k(n) depends on m − n only — a relative position. Compare a
rotation written by hand with posenc's `positions.build("rope", …)`."""),
    code("""from posenc import positions

dh, base = 16, 10000.0
rope = positions.build("rope", dim=64, num_heads=4)                  # «머리 폭 16|head width 16»
freq = base ** (-torch.arange(dh // 2, dtype=torch.float32) * 2 / dh)

def rotate(x, pos):
    angle = pos[:, None].float() * freq
    a, b = x[..., : dh // 2], x[..., dh // 2 :]
    return torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], dim=-1)

q, k = torch.randn(1, dh), torch.randn(1, dh)
pos = torch.arange(40)
torch.testing.assert_close(rotate(q.expand(40, dh), pos), rope.rotate_one(q.expand(40, dh), pos))  # «posenc 와 같다|the same as posenc»
scores = rotate(q.expand(40, dh), pos) @ rotate(k.expand(40, dh), pos).T   # q(m)·k(n)
print(f"q(m)·k(m−3)«, m = 3…39 의 편차|, spread over m = 3…39»: {(scores.diagonal(-3).max() - scores.diagonal(-3).min()).item():.1e}")"""),
    code("""fig, ax = plt.subplots(figsize=(4, 3.4))
im = ax.imshow(scores, cmap="RdBu")
ax.set_xlabel("«키 위치 n|key position n»")
ax.set_ylabel("«질의 위치 m|query position m»")
ax.set_title("RoPE: q(m)·k(n)«, 대각선마다 일정|, constant per diagonal»")
fig.colorbar(im)
book.show(fig)"""),
]
DEMO["multihead-shapes"] = [
    md(ko="""**코드로**: 여러 헤드는 폭 D 를 H 조각으로 나눈 것뿐이다: (B, T, D) → (B, T, H, D/H) → (B, H, T, D/H) 로 바꿔
헤드마다 어텐션을 하고, 거꾸로 되돌린다. 유효 길이 밖의 키는 로짓을 −∞ 로 가린다. posenc 의 `MultiHeadAttention` 과 출력·가중치를 비교한다.""",
       en="""**As code**: heads just cut the width D into H pieces: reshape (B, T, D) → (B, T, H, D/H) → (B, H, T, D/H),
attend per head, and reshape back. Keys past a valid length get logits −∞. Compare output and weights with posenc's
`MultiHeadAttention`."""),
    code("""from posenc.attention import MultiHeadAttention

B, Tq, Tk, D, H = 2, 4, 6, 100, 5
mha = MultiHeadAttention(dim=D, num_heads=H).double().eval()
x = torch.randn(B, Tq, D, dtype=torch.float64)                  # «질의|queries»
kv = torch.randn(B, Tk, D, dtype=torch.float64)                 # «키와 값|keys and values»
valid = torch.tensor([3, 2])


def split(t):                                                   # (B, T, D) → (B, T, H, D/H) → (B, H, T, D/H)
    return t.view(t.shape[0], t.shape[1], H, D // H).transpose(1, 2)


with torch.no_grad():
    q, k, v = split(mha.q_proj(x)), split(mha.k_proj(kv)), split(mha.v_proj(kv))   # (2, 5, 4, 20), (2, 5, 6, 20), (2, 5, 6, 20)
    logits = q @ k.transpose(-1, -2) / math.sqrt(D // H)        # (B, H, Tq, Tk) = (2, 5, 4, 6)
    keep = torch.arange(Tk)[None, :] < valid[:, None]           # (B, Tk)
    weights = logits.masked_fill(~keep[:, None, None, :], float("-inf")).softmax(-1)
    heads_out = weights @ v                                     # (B, H, Tq, D/H) = (2, 5, 4, 20)
    out = mha.out_proj(heads_out.transpose(1, 2).reshape(B, Tq, D))   # (B, Tq, H, D/H) → (B, Tq, D) = (2, 4, 100)
    ref, ref_weights = mha(x, kv, valid_lens=valid, need_weights=True)
torch.testing.assert_close(out, ref)                            # «posenc 와 같다|the same as posenc»
torch.testing.assert_close(weights, ref_weights)
masked = sum(weights[b, ..., int(n):].abs().sum().item() for b, n in enumerate(valid))
print(f"x {tuple(x.shape)} → q {tuple(q.shape)} → «가중치|weights» {tuple(weights.shape)} → out {tuple(out.shape)}")
print(f"«가려진 키의 가중치 합|weight on masked keys»: {masked}")"""),
]
DEMO["multihead-shapes-check"] = [
    code("""v = f.values  # «실험실과 같은 모양, 같은 정확한 0|the lab's shapes, the same exact zero»
assert [list(x.shape), list(out.shape), list(weights.shape)] == [v["input_shape"], v["output_shape"], v["weights_shape"]]
assert masked == v["masked_weight"] == 0"""),
]
DEMO["complexity"] = [
    md(ko="""**코드로 — 어텐션의 곱셈-덧셈 수**: 투영 넷은 (n, d) @ (d, d) 라 4·n·d², 점수 QKᵀ 는 n²·d, 가중치 × V 도 n²·d.
이 식을 torch 가 posenc 의 어텐션에서 센 FLOPs (= 2 × 곱셈-덧셈)와 비교하고, log-log 기울기(지수)를 맞춘다.
n ≪ d 에서는 n·d² 가, n ≫ d 에서는 n²·d 가 이기므로 지수는 1 에서 2 로 옮겨 간다.""",
       en="""**As code — attention's multiply-adds**: the four projections are (n, d) @ (d, d), 4·n·d²; the scores QKᵀ are n²·d;
weights × V is n²·d again. Compare this formula with the FLOPs (= 2 × multiply-adds) torch counts on posenc's attention,
and fit the log-log slope (the exponent). n·d² wins at n ≪ d and n²·d at n ≫ d, so the exponent moves from 1 to 2."""),
    code("""from posenc.lab.flops import count_flops


def attention_macs(n, d):                                       # «곱셈-덧셈 수|multiply-adds»
    projections = 4 * n * d * d                                 # W_q, W_k, W_v, W_o: (n, d) @ (d, d)
    scores = n * n * d                                          # Q Kᵀ: (n, d) @ (d, n)
    mix = n * n * d                                             # «가중치 × V|weights × V»: (n, n) @ (n, d)
    return projections + scores + mix


d = 64
ns = [32, 64, 128, 256]
mha64 = MultiHeadAttention(dim=d, num_heads=4).double()
counted = [count_flops(lambda: mha64(torch.randn(1, n, d, dtype=torch.float64), need_weights=True)) for n in ns]
assert counted == [2 * attention_macs(n, d) for n in ns]       # «FLOPs = 2 × 곱셈-덧셈|FLOPs = 2 × multiply-adds»
slope = math.log(counted[-1] / counted[-2]) / math.log(ns[-1] / ns[-2])
wide = 2.0 ** torch.arange(3, 17)                               # n = 8 … 65536
macs = torch.tensor([attention_macs(n, d) for n in wide.tolist()])
local = (macs[1:] / macs[:-1]).log2()                           # «n 을 두 배로 할 때의 지수|exponent per doubling of n»
fit = torch.linalg.lstsq(torch.stack([wide.log(), torch.ones_like(wide)], 1)[-4:], macs.log()[-4:, None]).solution[0].item()
print(f"«기울기 n = 128→256|slope n = 128→256»: {slope:.4f}; «n = 8192…65536 에 맞춘 지수|exponent fitted on n = 8192…65536»: {fit:.3f}")"""),
    code("""fig, ax = plt.subplots()
ax.loglog(wide, macs, marker="o", label="«어텐션|attention»")
ax.loglog(wide, 4 * wide * d * d, "--", label="4·n·d²")
ax.loglog(wide, 2 * wide**2 * d, ":", label="2·n²·d")
ax.axvline(d, color="0.6", linewidth=0.8)
ax.set_xlabel("«길이 n|length n»")
ax.set_ylabel("«곱셈-덧셈|multiply-adds»")
ax.set_title("«n > d 부터 n² 이 지배한다|past n = d, n² dominates»")
ax.legend()
book.show(fig)"""),
]
DEMO["complexity-check"] = [
    code("""assert counted == f.values["flops"]["attention"]  # «실험실이 센 FLOPs|the lab's FLOP counts»
assert math.isclose(slope, f.values["flops_slope"]["attention"])"""),
]
DEMO["pe-module"] = [
    md(ko="""**코드로**: 영 입력 (2, 60, 32) 에 식으로 만든 표를 더하고 (모양 그대로), 같은 seed 로 드롭아웃을 건다. 512 위치에서
열 짝마다 부호가 바뀌는 횟수를 센다. posenc 의 `add` 가 같은 결과를 내는지 확인한다.""",
       en="""**As code**: add the table built from the formula to a zero (2, 60, 32) input (the shape stays), apply dropout with the
same seed, and count each column pair's sign changes over 512 positions. Check that posenc's `add` gives the same."""),
    code("""from posenc import positions

width, rows = 32, 60
freq32 = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)


def table_of(n):                                                # (n, width): sin, cos, sin, cos, …
    angle = torch.arange(n, dtype=torch.float64)[:, None] * freq32
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


zeros = torch.zeros(2, rows, width)                             # (B, T, d)
added = zeros + table_of(rows).float()                          # (2, 60, 32): «모양 그대로|shape unchanged»
torch.testing.assert_close(positions.build("sinusoidal", dim=width, num_heads=1).add(zeros, torch.arange(rows)), added)
torch.manual_seed(0)
dropped = torch.nn.functional.dropout(added + 1.0, p=0.1, training=True)   # 1 + PE «에는 0 이 없다|has no zeros»
zero_fraction = (dropped == 0).double().mean().item()
long = table_of(512)
crossings = ((long[1:] * long[:-1]) < 0).sum(0).view(-1, 2).sum(-1).tolist()   # «짝마다 부호 바뀜|sign changes per pair»
print(f"{tuple(zeros.shape)} → {tuple(added.shape)}; «드롭아웃이 0 으로 만든 비율|zeroed by dropout»: {zero_fraction:.4f}")
print("«짝마다 부호 바뀜|sign changes per pair»:", crossings)"""),
    code("""fig, ax = plt.subplots()
for c in (6, 7, 8, 9):
    ax.plot(table_of(rows)[:, c], label=f"«열|column» {c}")
ax.set_xlabel("«위치|position»")
ax.set_ylabel("«값|value»")
ax.set_title("«앞 열일수록 빨리 진동한다|lower columns oscillate faster»")
ax.legend()
book.show(fig)"""),
]
DEMO["pe-module-check"] = [
    code("""assert crossings == f.values["crossings_per_pair"] and zero_fraction == f.values["dropout_zero_fraction"]  # «실험실과 같은 수|the lab's counts»
assert list(added.shape) == f.values["output_shape"]"""),
]
DEMO["exercises-depth"] = [
    md(ko="""**코드로**: 위치를 한 번 더한 입력에 posenc 의 어텐션 층을 16 개까지 쌓는다 (잔차 없이, pre-norm 잔차와 함께).
층마다 문장 안 토큰들이 얼마나 다른지(평균을 뺀 노름의 비)와, 앞 절반의 문장으로 맞춘 릿지 최소제곱 프로브가 나머지 절반에서
위치를 맞히는 비율을 직접 잰다. 가중치는 무작위라 실험실과 숫자는 다르지만 같은 모양이어야 한다.""",
       en="""**As code**: stack up to 16 of posenc's attention layers on an input with positions added once (no residuals, and
pre-norm residuals). Per layer, measure by hand how different the tokens of a sentence still are (norm after removing
the mean, relative) and how often a ridge least-squares probe fitted on half the sentences reads the position on the
other half. The weights are random, so the numbers differ from the lab's, but the shape must be the same."""),
    code("""from posenc.embedding import TokenEmbedding

S, T, width, depths = 96, 32, 64, [0, 1, 2, 4, 8, 16]
ids = torch.randint(0, 100, (S, T))
with torch.no_grad():
    x0 = positions.build("sinusoidal", dim=width, num_heads=1).add(TokenEmbedding(vocab_size=100, dim=width).double()(ids), torch.arange(T))
layers = [MultiHeadAttention(dim=width, num_heads=4).double() for _ in range(16)]
norms = [torch.nn.LayerNorm(width).double() for _ in range(16)]


def spread(h):                                                  # «문장 안 토큰들의 퍼짐|spread of the tokens in a sentence»
    return ((h - h.mean(1, keepdim=True)).norm() / h.norm()).item()


def probe(h):                                                   # «릿지 최소제곱 → 위치의 원-핫|ridge least squares → one-hot position»
    a = torch.cat([h, torch.ones(S, T, 1, dtype=h.dtype)], -1)
    fit_on, test_on = a[: S // 2].reshape(-1, width + 1), a[S // 2 :].reshape(-1, width + 1)
    target = torch.eye(T, dtype=h.dtype).repeat(S // 2, 1)
    w = torch.linalg.solve(fit_on.T @ fit_on + 1e-3 * torch.eye(width + 1, dtype=h.dtype), fit_on.T @ target)
    return ((test_on @ w).argmax(-1) == torch.arange(T).repeat(S // 2)).double().mean().item()


depth_acc, depth_spread = {"residual": [], "plain": []}, {"residual": [], "plain": []}
with torch.no_grad():
    for kind in depth_acc:
        h = x0
        for k in range(17):
            if k in depths:
                depth_acc[kind].append(probe(h))
                depth_spread[kind].append(spread(h))
            if k < 16:
                h = h + layers[k](norms[k](h))[0] if kind == "residual" else layers[k](h)[0]
for kind in depth_acc:
    print(f"{kind:8}: «프로브 정확도|probe accuracy»", [round(a, 3) for a in depth_acc[kind]],
          "«퍼짐|spread»", [f"{s:.1e}" for s in depth_spread[kind]])"""),
]
DEMO["exercises-depth-check"] = [
    code("""chance, v = 1 / T, f.values  # «무작위 층은 달라도 같은 모양|other random layers, the same shape»
for acc in (depth_acc, {"plain": v["accuracy_plain"], "residual": v["accuracy_residual"]}):
    assert acc["plain"][0] > 5 * chance and acc["plain"][-1] < 2 * chance and acc["residual"][-1] > 5 * chance"""),
    code("""fig, ax = plt.subplots()
for kind, style in (("residual", "o"), ("plain", "s")):
    ax.plot(depths, depth_acc[kind], style + "-", label=f"{kind} («이 노트북|this notebook»)")
    ax.plot(depths, f.values[f"accuracy_{kind}"], style + ":", alpha=0.6, label=f"{kind} («실험실|the lab»)")
ax.axhline(1 / T, color="0.6", linewidth=0.8, label="«우연|chance»")
ax.set_xlabel("«쌓은 어텐션 층|attention layers stacked»")
ax.set_ylabel("«프로브가 위치를 맞힌 비율|probe accuracy on position»")
ax.set_title("«잔차 없이는 위치가 씻겨 나간다|without residuals position washes out»")
ax.legend(fontsize=8)
book.show(fig)"""),
]

DEMO["exercises-learned"] = [
    md(ko="""**코드로**: 위치마다 학습하는 벡터 하나 — `nn.Parameter` 모양 (16, d) — 를 토큰에 더하고, posenc 의 어텐션 한 층으로
'바로 앞 토큰 베끼기' 를 150 걸음 학습한다. 그 표에는 17 번째 행이 없다: 위치 16 을 물으면 torch 가 `IndexError` 를,
posenc 의 `learned` 방식은 `ValueError` 를 낸다.""",
       en="""**As code**: one learned vector per position — an `nn.Parameter` of shape (16, d) — added to the tokens, and one of
posenc's attention layers, trained for 150 steps to copy the previous token. The table has no 17th row: asked for position
16, torch raises `IndexError` and posenc's `learned` scheme a `ValueError`."""),
    code("""class PreviousToken(torch.nn.Module):
    def __init__(self, length=16, vocab=16, width=32):
        super().__init__()
        self.token = torch.nn.Embedding(vocab, width)
        self.where = torch.nn.Parameter(torch.randn(length, width))   # «위치마다 벡터 하나|one vector per position»
        self.attn = MultiHeadAttention(dim=width, num_heads=2)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids):
        x = self.token(ids) + self.where[torch.arange(ids.shape[1])]  # «위치 i → 표의 행 i|position i → row i»
        return self.head(x + self.attn(x)[0])


torch.manual_seed(0)
prev = PreviousToken()
opt = torch.optim.Adam(prev.parameters(), lr=3e-3)
g = torch.Generator().manual_seed(61)
for step in range(150):
    seq = torch.randint(0, 16, (32, 16), generator=g)
    loss = torch.nn.functional.cross_entropy(prev(seq)[:, 1:].reshape(-1, 16), seq[:, :-1].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
test = torch.randint(0, 16, (256, 16), generator=g)
with torch.no_grad():
    learned_acc = (prev(test)[:, 1:].argmax(-1) == test[:, :-1]).double().mean().item()
print(f"«앞 토큰을 맞힌 비율|previous token right»: {learned_acc:.3f} («우연|chance» {1 / 16:.3f})")
for name, ask in (("torch", lambda: prev(torch.randint(0, 16, (1, 17)))),
                  ("posenc learned", lambda: positions.build("learned", dim=32, num_heads=2, max_len=16).encode(torch.arange(17)))):
    try:
        ask()
    except (IndexError, ValueError) as err:
        print(f"«위치 16 에서|at position 16»: {name}: {type(err).__name__} — {err}")"""),
]
DEMO["exercises-learned-check"] = [
    code("""v = f.values  # «다른 초기값, 같은 결론: 풀고, 표 밖의 행은 없다|another start, the same verdict: solved, no row past the table»
assert learned_acc > 0.9 and v["accuracy"]["learned"] > 0.9 and v["accuracy_beyond_table"]["learned"] is None"""),
]

EXERCISE_CELLS = [
    md(ko="### 연습문제", en="### Exercises"),
    *exercise("03.rope", ko="""`rope(x, positions, base)` 를 써라: x 는 (T, d), 짝 i 는 (i, i + d/2), 각도는 위치 × base^(−2i/d).
posenc 의 RoPE 와 같은 값을 내야 한다.""",
              en="""Write `rope(x, positions, base)`: x is (T, d), pair i is (i, i + d/2), the angle is position ×
base^(−2i/d). It must give posenc's RoPE values.""",
              stub="def rope(x, positions, base):\n    ...\n\nanswer = ..."),
    *exercise("03.params", ko="`MultiHeadAttention(dim=64, num_heads=4)` 의 매개변수는 몇 개인가? (q, k, v, 출력 투영, 각각 편향 포함)",
              en="How many parameters does `MultiHeadAttention(dim=64, num_heads=4)` have? (q, k, v and output projections, each with a bias)"),
]

CELLS = [
    md(ko="""# 상대 위치, RoPE, 학습 길이 밖

이 노트북은 글 002 (d2l 11.6 절, 셀프 어텐션과 위치 인코딩) 를 따라간다: 셀프 어텐션의 모양, CNN·RNN·셀프 어텐션의 비용, 위치 인코딩 모듈과 그 열들, 그리고 세 연습문제 — 층을 쌓으면? 학습형 위치는? 상대 위치는? 마지막 연습문제가 RoPE 와 학습 길이 밖의 위치로 이어진다. (상대 위치 정보 절의 2×2 회전은 노트북 1 의 5절에서 쟀다.)""",
       en="""# Relative positions, RoPE and beyond the training length

This notebook follows article 002 (d2l section 11.6, self-attention and positional encoding): the shapes of self-attention, the cost of CNN, RNN and self-attention, the encoding as a module and its columns, and the three exercises — stacking layers, learned positions, relative positions. The last one leads to RoPE and to positions beyond the training length. (The section's 2×2 rotation for relative positions was measured in notebook 1, section 5.)"""),
    *setup_cells("002"),
    md(ko="""### 1. 셀프 어텐션의 모양

d2l 의 점검을 그대로: 폭 100, 헤드 5 개, 배치 2, 질의 4 개, 유효 길이 [3, 2]. 셀프 어텐션은 (배치, 길이, d) 를 같은 모양으로 내보낸다. 유효 길이 밖의 키는 가중치가 정확히 0 이라, 그 키를 바꿔도 출력이 움직이지 않는다. 이 실험은 d2l 의 폭 100 을 쓰므로 `--dim` 을 따르지 않는다.""",
       en="""### 1. The shape of self-attention

d2l's check as it is: width 100, 5 heads, batch 2, 4 queries, valid lengths [3, 2]. Self-attention returns (batch, length, d) in the same shape; keys past a valid length get exactly zero weight, so changing them moves nothing. This experiment uses d2l's width 100, not `--dim`."""),
    *DEMO["multihead-shapes"],
    code("""f = course.claim("multihead-shapes")
course.show(f, LANG)"""),
    *DEMO["multihead-shapes-check"],
    md(ko="""**해 보기** — seed 를 바꿔도 모양과 정확한 0 은 그대로다. 남는 차이(`masked_keys_effect`)는 반올림뿐이다.""",
       en="""**Try this** — another seed: the same shapes and the same exact zero; what is left (`masked_keys_effect`) is rounding."""),
    code("""course.try_this("multihead-shapes", seed=2, lang=LANG)"""),
    md(ko="""### 2. CNN, RNN, 셀프 어텐션의 비용

d2l 은 세 구조를 계산량, 순차 연산 수, 최대 경로 길이로 비교한다. 실험실은 각 구조의 실제 층 하나(Conv1d k = 3, RNNCell 반복, 라이브러리의 어텐션)를 n = 32…256 에서 잰다: torch 가 센 FLOPs 와 그 log-log 기울기, autograd 의 가장 긴 사슬(병렬 하드웨어로도 줄일 수 없는 순차 단계), 입력 n−1 에서 출력 0 까지의 경로. 벽시계 시간은 그림에만 있다.""",
       en="""### 2. The cost of CNN, RNN and self-attention

d2l compares the three by computation, sequential operations and maximum path length. The lab measures one real layer of each (Conv1d with k = 3, an RNNCell loop, the library's attention) at n = 32…256: the FLOPs torch counts and their log-log slope, autograd's longest chain (the sequential steps no parallel hardware shortens), and the path from input n−1 to output 0. Wall times are in the figure only."""),
    *DEMO["complexity"],
    code("""f = course.claim("complexity")
course.show(f, LANG)"""),
    *DEMO["complexity-check"],
    md(ko="""**해 보기 — 여기서 주장이 깨진다.** d = 256 이면 n = 32…256 어디에서도 n 이 d 보다 크지 않다. 어텐션의 투영(n·d²)이 n²·d 부분보다 커서 FLOPs 가 거의 선형으로 자라고(기울기 약 1.26), '어텐션의 기울기가 나머지보다 0.3 이상 크다' 는 규칙이 깨진다. O(n²·d) 는 n 이 클 때의 이야기다. n < d 에서는 어텐션도 다른 층보다 더 제곱으로 자라지 않는다. 경로 길이와 순차 단계는 그대로다.""",
       en="""**Try this — here the claim stops holding.** With d = 256, n = 32…256 never exceeds d: attention's projections (n·d²) outweigh its n²·d part, its FLOPs grow almost linearly (slope about 1.26) and the rule 'attention's slope exceeds the others' by more than 0.3' fails. O(n²·d) is about large n; below n = d attention grows no faster than the others. Path lengths and sequential steps do not change."""),
    code("""course.try_this("complexity", dim=256, lang=LANG)"""),
    md(ko="""### 3. 모듈로서의 위치 인코딩

d2l 처럼 영(0) 입력 (2, 60, d/2) 에 사인파 표를 더하고 드롭아웃 p = 0.1 을 건다. 모양은 그대로이고, 드롭아웃은 약 p 만큼을 0 으로 만든다. 열 짝마다 60 위치에서 부호가 몇 번 바뀌는지 세면 앞쪽 열일수록 많다 — 이진수의 아랫자리 비트가 더 자주 바뀌는 것과 같다. 그림: 열 6–9, 그리고 표 전체의 히트맵.""",
       en="""### 3. The encoding as a module

As in d2l: the sinusoid table added to a zero (2, 60, d/2) input, with dropout p = 0.1. The shape is unchanged and dropout zeroes about p of the entries. Counting the sign changes of each column pair over 60 positions, lower columns change more often — as the low bits of a binary number flip most often. Figures: columns 6–9 and the heat map of the whole table."""),
    *DEMO["pe-module"],
    code("""f = course.claim("pe-module")
course.show(f, LANG)"""),
    *DEMO["pe-module-check"],
    md(ko="""**해 보기** — d 를 128 로: 입력이 (2, 60, 64) 가 되고 주파수 짝이 많아져도, 부호 바뀜은 여전히 앞 열에서 뒤 열로 갈수록 줄어든다.""",
       en="""**Try this** — d = 128: the input becomes (2, 60, 64) and there are more frequency pairs; the sign changes still fall from lower to higher columns."""),
    code("""course.try_this("pe-module", dim=128, lang=LANG)"""),
    md(ko="""### 4. 연습문제 1: 층을 쌓으면

위치를 입력에 한 번만 더하고 어텐션 층을 여러 개 쌓으면 어떤 문제가 생길까? 어텐션은 토큰들의 가중 평균이라, 층마다 토큰들이 서로 닮아 간다. 실험실은 무작위 어텐션 층 0…16 개를 지난 은닉 상태에서 릿지 프로브가 위치를 얼마나 읽는지 잰다 — 잔차 연결 없이, 그리고 pre-norm 잔차 연결과 함께.""",
       en="""### 4. Exercise 1: stacking layers

What goes wrong when the position is added once and many attention layers are stacked? Attention is a weighted average of tokens, so with every layer the tokens grow alike. The lab measures how well a ridge probe reads the position from the hidden states after 0…16 random attention layers — without residual connections, and with pre-norm residuals."""),
    *DEMO["exercises-depth"],
    code("""f = course.claim("exercises-depth")
course.show(f, LANG)"""),
    *DEMO["exercises-depth-check"],
    md(ko="""**해 보기** — d 를 16 으로: 좁은 모델에서는 처음부터 프로브가 덜 읽는다. 그래도 잔차 연결은 그것을 지키고, 잔차가 없으면 여전히 우연 수준으로 무너진다.""",
       en="""**Try this** — d = 16: in a narrow model the probe reads less from the start; residuals still keep it, and without them it still collapses to chance."""),
    code("""course.try_this("exercises-depth", dim=16, lang=LANG)"""),
    md(ko="""### 5. 연습문제 2: 학습형 위치

위치마다 벡터 하나를 학습하는 표를 만들 수 있을까? 실험실은 '바로 앞 토큰 베끼기' 과제에서 인코더 한 층을 150 걸음 학습한다 (위치 16 개). 학습형 표, 사인파, 위치 없음을 나란히 비교한다. 학습형 표는 과제를 풀지만, 16 번째 위치 너머의 행은 없다.""",
       en="""### 5. Exercise 2: learned positions

Can each position get a learned vector? The lab trains one encoder layer for 150 steps on copy-the-previous-token with 16 positions: a learned table, the sinusoid and no positions side by side. The learned table solves the task, and has no row beyond its 16 positions."""),
    *DEMO["exercises-learned"],
    code("""f = course.claim("exercises-learned")
course.show(f, LANG)"""),
    *DEMO["exercises-learned-check"],
    md(ko="""**해 보기** — seed 를 바꿔 다시 학습해도 같다: 학습형과 사인파는 풀고, 위치 없이는 못 푼다.""",
       en="""**Try this** — trained again from another seed: the learned table and the sinusoid solve it, no positions does not."""),
    code("""course.try_this("exercises-learned", seed=1, lang=LANG)"""),
    md(ko="""### 6. 연습문제 3: 상대 위치와 이동

질의와 키 사이의 간격마다 다른 학습 임베딩을 줄 수 있을까? 그것이 상대 위치다 (Shaw 외, T5; RoPE 는 간격을 회전으로 넣는다). 같은 과제를 학습한 뒤 모든 위치를 64 칸 밀어서 시험한다. 점수가 간격에만 달려 있는 방식은 밀어도 그대로이고, 절대 위치인 사인파는 떨어진다. 그림의 막대: 학습한 위치에서와 멀리 민 위치에서의 정확도 (학습형 표는 그 자리에 행이 없다).""",
       en="""### 6. Exercise 3: relative positions under a shift

Can each query–key offset get its own learned embedding? That is a relative position (Shaw et al., T5; RoPE puts the offset in as a rotation). After training on the same task, every position is shifted by 64 at test time. Schemes whose scores depend on the offset alone are unchanged; the sinusoid, an absolute encoding, drops. The bars: accuracy at the trained positions and shifted far away (the learned table has no row there)."""),
    *DEMO["exercises-relative"],
    code("""f = course.claim("exercises-relative")
course.show(f, LANG)"""),
    md(ko="""**해 보기** — seed 를 바꿔 다시 학습한다: 상대 방식은 이동 뒤에도 정확도를 지키고, 사인파는 시드마다 다르게 떨어진다. RoPE 가 이동에 무관한 것은 학습 운이 아니라 구조다.""",
       en="""**Try this** — trained again from another seed: the relative schemes keep their accuracy after the shift, and the sinusoid drops by a different amount. RoPE's indifference to the shift is structure, not luck."""),
    code("""course.try_this("exercises-relative", seed=1, lang=LANG)"""),
    md(ko="""### 학습 길이 밖: 레지스트리의 방식들

레지스트리의 방식들을 같은 잣대로 재면: 'i−j 만' 은 유사도가 간격에만 달려 있는지, 'L 너머' 는 학습 길이의 8 배 위치에서도 답을 하는지다. 학습형 표는 L 너머에서 답하지 못한다. 답을 한다고 학습한 모델이 거기서 잘 동작한다는 뜻은 아니다 — 그것은 `posenc lengthgen` 벤치마크(benchmarks/lengthgen)가 잰다.""",
       en="""### Beyond the training length: the registry's schemes

The registry's schemes measured on one scale: 'i−j only' asks whether the similarity depends on the offset alone, 'beyond L' whether the scheme answers at 8× the training length. The learned table does not answer there. Answering does not mean a trained model works there — `posenc lengthgen` (benchmarks/lengthgen) measures that."""),
    code("""course.properties(["sinusoidal", "learned", "rope", "alibi", "t5", "shaw"], LANG)"""),
    *EXERCISE_CELLS,
    md(ko="""### 더 보기

명령줄에서 같은 주장들을 한 번에: `posenc lab --lang ko --only multihead-shapes,complexity,pe-module,exercises-depth,exercises-learned,exercises-relative` (HTML 보고서는 `lab-report/index.html`, 오른쪽 위 단추로 언어를 바꾼다). 탐색기: `posenc explore` — `rope`, `t5`, `alibi` 를 고르고 '창 시작 위치' 를 멀리 옮겨 본다. 유사도 행렬과 거리 곡선이 그대로다. `learned` 로 바꾸면 L 너머에서 값을 거절한다.""",
       en="""### Further

The same claims from the command line: `posenc lab --lang en --only multihead-shapes,complexity,pe-module,exercises-depth,exercises-learned,exercises-relative` (the HTML report is `lab-report/index.html`; its top-right button switches the language). The explorer: `posenc explore` — pick `rope`, `t5` or `alibi` and move the window start far out: the similarity matrix and the distance profile stay the same. Switch to `learned` and positions beyond L are refused."""),
]
