"""Chapter source for notebooks/{ko,en}/01-order-into-attention.ipynb (built by scripts/build_notebooks.py)."""

from cells import code, exercise, md, setup_cells

SLUG = "01-order-into-attention"

DEMO = {}
DEMO["naive-position"] = [
    md(ko="""**코드로**: 여섯 토큰의 벡터 끝에 위치 번호를 붙이면 로짓 x_i·x_j/√5 에 위치 부분 i·j/√5 가 그대로 들어간다.
창을 0–5 에서 100–105 로 옮기면 그 부분의 폭이 어떻게 되는지 직접 계산한다.""",
       en="""**As code**: append the position number to six token vectors and the logit x_i·x_j/√5 gets the position part
i·j/√5 as is. Compute its spread for the window at 0–5 and at 100–105."""),
    code("""content = torch.randn(6, 4, dtype=torch.float64)          # «내용 폭 4 인 토큰 여섯|six tokens, content width 4»
spreads = {}
for start in (0, 100):
    i = torch.arange(start, start + 6, dtype=torch.float64)
    x = torch.cat([content, i[:, None]], dim=1)             # «[내용, 위치 번호]|[content, position number]»
    logits = x @ x.T / math.sqrt(5)
    position_part = torch.outer(i, i) / math.sqrt(5)
    torch.testing.assert_close(logits - position_part, content @ content.T / math.sqrt(5))
    spreads[start] = (position_part.max() - position_part.min()).item()
    print(f"«창 시작|window start» {start:3}: «위치 부분의 폭|position-part spread» = {spreads[start]:.4f}, "
          f"«최대 확률|max probability» = {logits.softmax(-1).max().item():.3f}")"""),
    code("""starts = torch.arange(0, 513, 8, dtype=torch.float64)
fig, ax = plt.subplots()
ax.plot(starts, ((starts + 5) ** 2 - starts ** 2) / math.sqrt(5), label="«위치 부분의 폭|position-part spread»")
ax.set_xlabel("«창의 시작 위치|window start»")
ax.set_ylabel("«로짓 폭|logit spread»")
ax.set_title("«원시 번호: 뒤로 갈수록 위치가 내용을 덮는다|raw index: position swamps content further on»")
ax.legend()
book.show(fig)"""),
    md(ko="실험실의 같은 측정 — 위치 부분은 토큰과 무관하므로 숫자가 정확히 같아야 한다:",
       en="The lab's measurement — the position part does not depend on the tokens, so the numbers must be the same:"),
]
DEMO["sinusoid-norm"] = [
    md(ko="""**코드로**: 글의 식 PE(i, 2k) = sin(i·ω_k), PE(i, 2k+1) = cos(i·ω_k), ω_k = base^(−2k/d) 를 그대로 쓰고,
posenc 의 `positions.build("sinusoidal", …)` 가 같은 표를 내는지 확인한다.""",
       en="""**As code**: write the article's formula PE(i, 2k) = sin(i·ω_k), PE(i, 2k+1) = cos(i·ω_k), ω_k = base^(−2k/d)
as is, and check that posenc's `positions.build("sinusoidal", …)` gives the same table."""),
    code("""d, L, base = 64, 512, 10000.0
pos = torch.arange(L, dtype=torch.float64)[:, None]
freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)   # ω_k
angle = pos * freq                                                  # (L, d/2)
pe = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)     # (L, d): sin, cos, sin, cos, …

from posenc import positions

scheme = positions.build("sinusoidal", dim=d, num_heads=4, max_length=L)
torch.testing.assert_close(pe, scheme.encode(torch.arange(L)))      # «posenc 의 표와 같다|the same as posenc's table»
norms = pe.norm(dim=1)
print(f"«행 노름|row norms»: min {norms.min().item():.12f}, max {norms.max().item():.12f}, √(d/2) = {math.sqrt(d / 2):.12f}")"""),
    code("""fig, ax = plt.subplots()
im = ax.imshow(pe[:128].T, aspect="auto", cmap="RdBu")
ax.set_xlabel("«위치 i|position i»")
ax.set_ylabel("«열|column»")
ax.set_title("«사인파 표 (처음 128 자리)|the sinusoidal table (first 128 positions)»")
fig.colorbar(im)
book.show(fig)"""),
]
DEMO["naive-position-check"] = [
    code("""lab = [w["position_spread"] for w in f.values["windows"]]
torch.testing.assert_close([spreads[0], spreads[100]], lab)  # «실험실과 같은 숫자|the lab's numbers»"""),
]
DEMO["sinusoid-norm-check"] = [
    code("""torch.testing.assert_close(norms.mean().item(), f.values["norm"])  # «실험실과 같은 숫자|the lab's number»"""),
]
DEMO["distance-only"] = [
    md(ko="""**코드로**: 그람 행렬 G = PE·PEᵀ 의 대각선(같은 거리 δ = i − j)마다 값이 하나뿐인지, 그리고 그 값이
Σ_k cos(δ·ω_k) 인지 잰다.""",
       en="""**As code**: along each diagonal of the Gram matrix G = PE·PEᵀ (one distance δ = i − j) there should be one value,
and it should be Σ_k cos(δ·ω_k)."""),
    code("""gram = pe @ pe.T
spread = max((gram.diagonal(delta).max() - gram.diagonal(delta).min()).item() for delta in range(L))
formula = torch.cos(torch.arange(L, dtype=torch.float64)[:, None] * freq).sum(dim=1)   # Σ_k cos(δ·ω_k)
error = max((gram.diagonal(delta) - formula[delta]).abs().max().item() for delta in range(L))
print(f"«대각선 안의 최대 편차|largest spread along a diagonal»: {spread:.2e}; «식과의 최대 차이|largest error against the formula»: {error:.2e}")"""),
    code("""fig, ax = plt.subplots(figsize=(4, 3.4))
im = ax.imshow(gram[:96, :96], cmap="viridis")
ax.set_xlabel("«위치 j|position j»")
ax.set_ylabel("«위치 i|position i»")
ax.set_title("PE(i)·PE(j)«: 대각선을 따라 일정|: constant along each diagonal»")
fig.colorbar(im)
book.show(fig)"""),
]
DEMO["distance-only-check"] = [
    code("""tol = f.values["tolerance"]
assert spread <= tol["diagonal_spread"] and error <= tol["formula_error"]  # «실험실의 허용치 안|within the lab's tolerance»"""),
]
DEMO["not-monotonic"] = [
    code("""profile = pe @ pe[0]                    # PE(0)·PE(δ), δ = 0 … L−1
fig, ax = plt.subplots()
ax.plot(profile)
ax.set_xlabel("«거리 δ|distance δ»")
ax.set_ylabel("PE(0)·PE(δ)")
ax.set_title("«거리의 함수지만 단조롭지 않다|a function of distance, not a falling one»")
book.show(fig)
rises = int((profile[1:] > profile[:-1]).sum())
print(f"«δ 가 커질 때 내적이 다시 커지는 곳|places where the product rises again»: {rises}")"""),
]
DEMO["shift-is-linear"] = [
    md(ko="""**코드로**: 위치 i 의 행에서 위치 i + k 의 행으로 가는 행렬 M_k 를 최소제곱으로 맞춰 본다. 사인파 표에서는
잔차가 반올림 수준이고, 같은 크기의 무작위 표에서는 그렇지 않다. (M_k 를 식으로 쓰는 것은 연습문제 01.shift.)""",
       en="""**As code**: fit the matrix M_k that takes the row of position i to the row of position i + k by least squares.
On the sinusoid the residual is at rounding level; on a random table of the same size it is not. (Writing M_k as a
formula is exercise 01.shift.)"""),
    code("""random_table = torch.randn(L, d, dtype=torch.float64) / math.sqrt(d)
for k in (1, 2, 5, 17, 50):
    row = []
    for table in (pe, random_table):
        q, r = torch.linalg.qr(table[:-k])                         # «최소제곱: QR 로|least squares by QR»
        m = torch.linalg.solve_triangular(r, q.T @ table[k:], upper=True)   # PE(i) @ m ≈ PE(i + k)
        row.append(((table[:-k] @ m - table[k:]).norm() / table[k:].norm()).item())
    print(f"k = {k:2}: «사인파 잔차|sinusoid residual» {row[0]:.1e}, «무작위 표 잔차|random-table residual» {row[1]:.2f}")"""),
]
DEMO["beyond-training-length"] = [
    md(ko="""**코드로**: 식은 위치 p 하나만 있으면 된다. 위치 4000 (L = 512 의 여덟 배 가까이)에서 행을 직접 계산하고 posenc 의
표와 비교한다. 학습형 표는 행 L 개짜리 `nn.Embedding` 이라, 위치 4000 을 물으면 torch 가 `IndexError` 를 낸다. posenc 의
`learned` 방식은 대신 무엇이 모자라는지 말하는 `ValueError` 를 낸다 — 실험실이 `learned_error` 로 적는 문장이다.""",
       en="""**As code**: the formula needs nothing but the position p. Compute the rows at position 4000 (nearly eight times
L = 512) by hand and compare them with posenc's table. A learned table is an `nn.Embedding` of L rows: ask it for
position 4000 and torch raises `IndexError`. posenc's `learned` scheme raises a `ValueError` saying what is missing
instead — the sentence the lab records as `learned_error`."""),
    code("""def row(p):                                                           # «식 그대로, 어느 위치든|the formula, at any position»
    angle = p * freq
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten()


far = 4000
torch.testing.assert_close(torch.stack([row(far), row(far + 1)]), scheme.encode(torch.tensor([far, far + 1])))
norm_far, dot_far, dot_origin = row(far).norm().item(), (row(far) @ row(far + 1)).item(), (row(0) @ row(1)).item()
print(f"p = {far}: «노름|norm» {norm_far:.6f} (√(d/2) = {math.sqrt(d / 2):.6f}), "
      f"PE(p)·PE(p+1) = {dot_far:.6f}, PE(0)·PE(1) = {dot_origin:.6f}")

table = torch.nn.Embedding(L, d)                                      # «학습형 표: 행 L 개|a learned table: L rows»
try:
    table(torch.tensor([far]))
except IndexError as err:
    print("torch.nn.Embedding:", type(err).__name__, "—", err)
learned = positions.build("learned", dim=d, num_heads=1, max_len=L)
try:
    learned.encode(torch.tensor([far]))
except ValueError as err:
    learned_error = str(err)
    print("posenc learned:", type(err).__name__, "—", learned_error)"""),
    code("""ps = torch.arange(0, 8001, 50)
here, after = torch.stack([row(p) for p in ps]), torch.stack([row(p + 1) for p in ps])
fig, ax = plt.subplots()
ax.plot(ps, here.norm(dim=1), label="«노름|norm» |PE(p)|")
ax.plot(ps, (here * after).sum(dim=1), "--", label="PE(p)·PE(p+1)")
ax.axvline(L, color="0.5", linestyle=":", label="«학습 길이 L|training length L»")
ax.set_xlabel("«위치 p|position p»")
ax.set_ylabel("«값|value»")
ax.set_title("«식은 L 너머에서도 같은 값을 낸다|the formula gives the same values past L»")
ax.legend()
book.show(fig)"""),
]
DEMO["beyond-training-length-check"] = [
    code("""assert f.values["position"] == far and learned_error == f.values["learned_error"]  # «같은 위치, 같은 문장|the same position, the same sentence»
torch.testing.assert_close([norm_far, dot_far, dot_origin], [f.values["norm"], f.values["dot_next"], f.values["dot_origin"]])"""),
]
DEMO["position-vs-content"] = [
    md(ko="""**코드로**: 먼저 크기를 잰다. 내용 벡터는 노름 ≈ 1 인 행에 √d/4 = 2 를 곱한 것이고, 사인파 행의 노름은 √(d/2) ≈ 5.66 이다 —
더하면 위치가 더 크다. 토큰 3 이 토큰 0 과 주제가 같은 (코사인 0.8) 문장 256 개를 직접 만들고, 토큰 0 의 어텐션 행을
위치 없이와 위치를 더해서 평균한다. 더하는 것은 posenc 의 `add` 로 해도 같다.""",
       en="""**As code**: first the sizes. Content vectors are rows of norm ≈ 1 times √d/4 = 2; a sinusoid row has norm
√(d/2) ≈ 5.66 — added together, position is the bigger part. Build 256 sentences in which token 3 shares token 0's topic
(cosine 0.8), and average token 0's attention row without positions and with them added. Adding through posenc's
`add` gives the same."""),
    code("""draws, scale = 256, math.sqrt(d) / 4
words = torch.randn(draws, 7, d, dtype=torch.float64) / math.sqrt(d)        # «노름 ≈ 1 인 내용 행|content rows of norm ≈ 1»
content = words[:, :6].clone()
content[:, 3] = 0.8 * content[:, 0] + 0.6 * words[:, 6]                     # «토큰 3: 토큰 0 과 같은 주제|token 3: token 0's topic»
content = scale * content                                                   # (256, 6, d)
print(f"«내용 벡터의 노름 (평균)|content norm (mean)»: {content.norm(dim=-1).mean().item():.3f}; "
      f"«위치 벡터의 노름|position norm»: {pe[:6].norm(dim=-1).mean().item():.3f} = √(d/2)")


def row0(x):                                                                # «토큰 0 의 어텐션 행, 평균|token 0's attention row, averaged»
    return (x @ x.transpose(-1, -2) / math.sqrt(d)).softmax(-1)[:, 0].mean(0)


placed = content + pe[:6]
torch.testing.assert_close(placed, scheme.add(content, torch.arange(6)))
without, with_pe = row0(content), row0(placed)
print(f"«주제 짝 (토큰 3)|topical partner (token 3)»: {without[3].item():.3f} → {with_pe[3].item():.3f}; "
      f"«이웃 (토큰 1)|neighbour (token 1)»: {without[1].item():.3f} → {with_pe[1].item():.3f}")"""),
    code("""fig, ax = plt.subplots()
ax.bar(torch.arange(6) - 0.2, without, width=0.4, label="«위치 없이|without positions»")
ax.bar(torch.arange(6) + 0.2, with_pe, width=0.4, label="«위치를 더해|with positions»")
ax.set_xlabel("«키 토큰 (1: 이웃, 3: 주제 짝)|key token (1: neighbour, 3: topical partner)»")
ax.set_ylabel("«토큰 0 의 어텐션|token 0's attention»")
ax.set_title("«위치가 주제에서 이웃으로 몫을 옮긴다|positions move share from topic to neighbour»")
ax.legend()
book.show(fig)"""),
]
DEMO["position-vs-content-check"] = [
    code("""v = f.values  # «다른 무작위 문장, 같은 방향|other random sentences, the same direction»
assert (with_pe[3] < without[3]) and (v["partner_with"] < v["partner_without"])
assert (with_pe[1] > without[1]) and (v["neighbour_with"] > v["neighbour_without"])"""),
]

EXERCISE_CELLS = [
    md(ko="### 연습문제", en="### Exercises"),
    *exercise("01.norm", ko="d = 256 인 사인파 표에서 한 행의 노름은 얼마인가? 숫자 하나로 답하라.",
              en="What is the norm of one row of the sinusoidal table with d = 256? Answer with one number."),
    *exercise("01.sinusoid", ko="`sinusoid(length, dim, base)` 를 써라: (length, dim) 표, 열은 sin, cos, sin, cos, … 순서.",
              en="Write `sinusoid(length, dim, base)`: the (length, dim) table, columns in the order sin, cos, sin, cos, …",
              stub="def sinusoid(length, dim, base):\n    ...\n\nanswer = ..."),
    *exercise("01.shift", ko="""`shift_matrix(k, dim, base)` 를 덧셈정리로 써라: 모든 i 에서 PE(i) @ M.T = PE(i + k) 인 (dim, dim)
행렬. 짝마다 2×2 회전 하나다.""",
              en="""Write `shift_matrix(k, dim, base)` from the angle-addition formulas: the (dim, dim) matrix with
PE(i) @ M.T = PE(i + k) for every i. It is one 2×2 rotation per pair.""",
              stub="def shift_matrix(k, dim, base):\n    ...\n\nanswer = ..."),
]

CELLS = [
    md(ko="""# 순서를 어텐션에 넣는 법: 원시 번호와 사인파

이 노트북은 글 000 을 따라간다. 어텐션에는 순서가 없으니 순서를 따로 넣어 줘야 한다. 위치 번호를 그대로 넣으면 무엇이 망가지는지, 그리고 사인파 표가 무엇을 보장하고 무엇은 보장하지 않는지를 잰다.""",
       en="""# Putting order into attention: the raw index and the sinusoid

This notebook follows article 000. Attention has no sense of order, so order has to be put in. We measure what breaks when the raw position number is used, and what the sinusoidal table does and does not guarantee."""),
    *setup_cells("000"),
    md(ko="""### 1. 원시 번호를 좌표로

토큰 벡터 끝에 위치 번호 i 를 그대로 하나 더 붙여 보자. 어텐션 로짓은 내적이므로 i·j 항이 그대로 들어간다. 실험실은 토큰 여섯 개(내용 폭 4)의 로짓을 위치 부분 i·j/√5 와 내용 부분으로 나눠 각 부분의 폭(최대 − 최소)을 위치 0–5 와 100–105 두 창에서 잰다. 위치 부분은 토큰과 무관해서 글의 숫자와 똑같고, 내용 부분은 시드로 만든 토큰에 달려 있어 글과 다르다. 그림은 창의 시작 위치를 L 까지 옮기며 두 폭과 최대 확률을 그린다.""",
       en="""### 1. The raw index as a coordinate

Append the position number i to every token vector as one more coordinate. Attention logits are dot products, so the term i·j goes straight in. The lab splits the logits of six tokens (content width 4) into the position part i·j/√5 and the content part, and measures the spread (max − min) of each for the windows at positions 0–5 and 100–105. The position part does not depend on the tokens, so it equals the article's numbers; the content part depends on the seeded tokens and differs. The figure slides the window up to L."""),
    *DEMO["naive-position"],
    code("""f = course.claim("naive-position")
course.show(f, LANG)"""),
    *DEMO["naive-position-check"],
    md(ko="""**해 보기** — seed 를 바꾸면 내용 벡터가 바뀌어 내용 폭도 바뀐다. 위치 폭은 그대로이고, 위치 100 근처에서는 여전히 위치가 내용을 덮는다. 문제는 특정 토큰이 아니라 i·j 가 자리와 함께 커진다는 데 있다.""",
       en="""**Try this** — another seed gives other content vectors and another content spread; the position spread is unchanged and near position 100 position still swamps content. The trouble is not the tokens: i·j grows with the position."""),
    code("""course.try_this("naive-position", seed=3, lang=LANG)"""),
    md(ko="""### 2. 사인파: 모든 자리의 크기가 같다

사인파 표는 열을 둘씩 짝지어 짝마다 다른 주파수의 sin 과 cos 를 넣는다. 짝 하나가 sin² + cos² = 1 을 보태므로 한 행의 노름은 위치와 상관없이 √(d/2) 다. 원시 번호가 어긴 조건 — 뒤 자리라고 더 커지면 안 된다 — 을 지킨다.""",
       en="""### 2. The sinusoid: every position has the same size

The sinusoidal table pairs its columns and fills each pair with the sine and cosine of one frequency. Each pair adds sin² + cos² = 1, so every row has norm √(d/2) whatever the position — the condition the raw index broke (a later position must not be bigger) holds."""),
    *DEMO["sinusoid-norm"],
    code("""f = course.claim("sinusoid-norm")
course.show(f, LANG)"""),
    *DEMO["sinusoid-norm-check"],
    md(ko="""**해 보기** — d 를 128 로: 노름은 √(128/2) = 8 이 되고, 편차는 여전히 반올림 수준이다.""",
       en="""**Try this** — d = 128: the norm becomes √(128/2) = 8 and the spread stays at rounding level."""),
    code("""course.try_this("sinusoid-norm", dim=128, lang=LANG)"""),
    md(ko="""### 3. 내적은 거리에만 달려 있다

두 행의 내적을 짝마다 삼각함수 덧셈정리로 풀면 cos((i−j)·ω) 가 남는다. 그래서 PE(i)·PE(j) 는 i 와 j 를 따로 보지 않고 i − j 만 본다. 실험실은 그람 행렬의 대각선마다 편차를 재고, 대각선 값을 식 Σ cos((i−j)·ω) 와 비교한다. 둘 다 계산 방법의 반올림 한계 안에 있으면 성립이다 (`values.tolerance`, docs/lab.md).""",
       en="""### 3. The inner product depends on distance only

Expand one pair of the dot product with the angle-addition formula and cos((i−j)·ω) is left: PE(i)·PE(j) sees i − j, not i and j. The lab measures the spread along every diagonal of the Gram matrix and compares the diagonals with the formula Σ cos((i−j)·ω); both must stay within the rounding bound of the method used (`values.tolerance`, docs/lab.md)."""),
    *DEMO["distance-only"],
    code("""f = course.claim("distance-only")
course.show(f, LANG)"""),
    *DEMO["distance-only-check"],
    md(ko="""**해 보기** — 위치를 5000 개로: 4096 개를 넘으면 실험실은 정확한 그람 행렬 대신 FFT 자기상관으로 잰다. 허용치도 그 방법의 한계를 따르므로 주장은 여전히 성립한다.""",
       en="""**Try this** — 5000 positions: above 4096 the lab measures with an FFT autocorrelation instead of the exact Gram matrix, and the tolerance follows that method, so the claim still holds."""),
    code("""course.try_this("distance-only", length=5000, lang=LANG)"""),
    md(ko="""### 4. …그러나 멀수록 덜 닮는 것은 아니다

거리의 함수라는 말과 거리가 멀수록 작아진다는 말은 다르다. 코사인을 더한 것은 진동한다. 실험실은 δ = 0…L−1 에서 PE(0)·PE(δ) 를 재어, 몇 구간에서 다시 커지는지와 최소가 어디인지 센다. 그림에서 빨간 점이 다시 커지는 자리다.""",
       en="""### 4. …but farther is not less similar

Being a function of distance is not the same as falling with distance: a sum of cosines oscillates. The lab computes PE(0)·PE(δ) for δ = 0…L−1, counts the steps where it rises and finds its minimum; the red dots in the figure are the rises."""),
    *DEMO["not-monotonic"],
    code("""f = course.claim("not-monotonic")
course.show(f, LANG)"""),
    md(ko="""**해 보기** — base 를 10 으로: 주파수가 모두 빨라져 곡선이 더 빨리 떨어지고 0 아래로도 내려가지만, 여전히 다시 오른다. 어떤 base 도 긴 구간에서 코사인의 합을 단조롭게 만들지 못한다.""",
       en="""**Try this** — base 10: every frequency is faster, the profile falls sooner and dips below zero, and it still rises again. No base makes a sum of cosines monotone over a long range."""),
    code("""course.try_this("not-monotonic", base=10.0, lang=LANG)"""),
    md(ko="""### 5. 진짜 쓸모: 이동은 선형사상 하나

짝 하나의 (sin, cos) 를 k 칸 미는 것은 각도 k·ω 만큼의 회전이고, 그 회전 행렬은 위치에 달려 있지 않다. 그러니 모든 p 에 똑같이 통하는 행렬 M_k 하나가 있다. 실험실은 모든 p 에 대해 PE(p+k) ≈ M_k·PE(p) 를 최소제곱으로 맞춰 잔차를 재고, 같은 크기의 무작위 표(N(0, 1/d))에도 똑같이 해 본다. 어텐션의 W 는 선형변환이라, 이 관계는 배우기만 하면 된다.""",
       en="""### 5. The real use: a shift is one linear map

Moving one (sin, cos) pair by k positions is a rotation by the angle k·ω, and that rotation does not depend on the position — so one matrix M_k works for every p. The lab fits PE(p+k) ≈ M_k·PE(p) over all p by least squares and reports the residual, and does the same on a random N(0, 1/d) table of the same shape. Attention's W is a linear map, so this relation is one it only has to learn."""),
    *DEMO["shift-is-linear"],
    code("""f = course.claim("shift-is-linear")
course.show(f, LANG)"""),
    md(ko="""**해 보기 — 여기서 주장이 깨진다.** 위치를 64 개로 줄이면 (d = 64 와 같다) 식이 미지수보다 적어서 어떤 표든, 무작위 표도 어떤 행렬로 정확히 맞춰진다. 무작위 표의 잔차도 0 이 되니 '무작위 표에는 그런 사상이 없다' 는 비교가 무너진다. `equations_per_unknown` 을 보라: 글의 설정(위치 512, 차원 64)에서는 약 8 이었다. 이 주장은 위치가 폭보다 훨씬 많을 때의 이야기다.""",
       en="""**Try this — here the claim stops holding.** With 64 positions (as many as d = 64) there are fewer equations than unknowns, so any table, a random one too, fits some matrix exactly: the random residual drops to rounding as well and the comparison no longer tells the sinusoid apart. See `equations_per_unknown`: about 8 at the articles' 512 positions on 64 dimensions. The claim is about many more positions than dimensions."""),
    code("""course.try_this("shift-is-linear", length=64, lang=LANG)"""),
    md(ko="""### 6. 덤: 학습 길이 밖

사인파는 식이라 어느 위치에나 값이 있다. L = 512 까지만 보았어도 위치 4000 의 노름은 같고, 이웃과의 내적은 위치 0 과 1 의 내적과 같다. 학습형 표는 가진 행 밖의 위치를 물으면 오류를 낸다 (`learned_error`). 정의된다는 것이 잘 동작한다는 뜻은 아니다 — 그것은 노트북 3 에서 잰다.""",
       en="""### 6. Bonus: beyond the training length

The sinusoid is a formula, so every position has a value. Trained up to L = 512 or not, position 4000 has the same norm, and its product with its neighbour equals that of positions 0 and 1. A learned table asked for a row it does not have raises (`learned_error`). Being defined is not working well — notebook 3 measures that."""),
    *DEMO["beyond-training-length"],
    code("""f = course.claim("beyond-training-length")
course.show(f, LANG)"""),
    *DEMO["beyond-training-length-check"],
    md(ko="""**해 보기** — base 를 100 으로: 주파수가 바뀌니 이웃 내적 값도 바뀐다. 그래도 원점의 값과 같다는 것은 어떤 base 에서도 성립한다 — 다시 거리만의 함수이기 때문이다.""",
       en="""**Try this** — base 100: the frequencies change, so the neighbour product changes; that it equals the origin's holds for any base, since it is again a function of distance only."""),
    code("""course.try_this("beyond-training-length", base=100.0, lang=LANG)"""),
    md(ko="""### 7. 값은 치른다: 위치와 내용의 경쟁

위치를 더하면 그만큼 내용이 흐려진다. 실험실은 토큰 3 이 토큰 0 과 주제가 같고(코사인 0.8) 토큰 1 이 바로 옆인 여섯 토큰 문장 256 개에서, 위치를 더하기 전과 후의 토큰 0 의 어텐션 행을 평균한다. 글은 문장 하나를 보였고 실험실은 평균을 내므로 숫자는 작지만 움직이는 방향은 같다: 주제 짝의 몫이 줄고 이웃의 몫이 는다. 오른쪽 그림: 내용의 크기를 키울수록 (√d 쪽으로) 위치가 어텐션을 덜 움직인다 — 노트북 4 의 √d 로 이어진다.""",
       en="""### 7. The price: position competes with content

Adding positions blurs content. Over 256 seeded six-token sentences in which token 3 shares token 0's topic (cosine 0.8) and token 1 is its neighbour, the lab averages token 0's attention row before and after the table is added. The article showed one sentence and the lab averages, so the numbers are smaller, but they move the same way: the topical partner loses share, the neighbour gains. Right-hand figure: the bigger the content (towards √d), the less positions move attention — notebook 4's √d."""),
    *DEMO["position-vs-content"],
    code("""f = course.claim("position-vs-content")
course.show(f, LANG)"""),
    *DEMO["position-vs-content-check"],
    md(ko="""**해 보기** — d 를 256 으로: 폭이 넓어도 방향은 같다. 주제 짝은 잃고 이웃은 얻는다.""",
       en="""**Try this** — d = 256: a wider model, the same direction: the partner loses, the neighbour gains."""),
    code("""course.try_this("position-vs-content", dim=256, lang=LANG)"""),
    md(ko="""### 다음

글 000 은 마지막으로 순열 등변성을 다시 잰다: 위치를 더하면 깨진다. 그 측정(`permutation`)은 노트북 2 의 첫 셀이다 — 글 001 이 바로 거기서 시작한다.""",
       en="""### Next

Article 000 ends by measuring permutation equivariance again: adding positions breaks it. That measurement (`permutation`) is the first cell of notebook 2, where article 001 begins."""),
    *EXERCISE_CELLS,
    md(ko="""### 더 보기

명령줄에서 같은 주장들을 한 번에: `posenc lab --lang ko --only naive-position,sinusoid-norm,distance-only,not-monotonic,shift-is-linear,beyond-training-length,position-vs-content` (HTML 보고서는 `lab-report/index.html`, 오른쪽 위 단추로 언어를 바꾼다). 탐색기: `posenc explore` — `sinusoidal` 을 고르고 '순진한 방법: 위치 번호를 좌표로' 패널(1절), '거리에 따른 유사도' 패널(4절: 다시 오르는 자리가 빨갛게), '내용과 위치의 경쟁' 패널(7절)을 본다. d, base, L 을 바꾸면 모든 패널이 같은 함수로 다시 그려진다.""",
       en="""### Further

The same claims from the command line: `posenc lab --lang en --only naive-position,sinusoid-norm,distance-only,not-monotonic,shift-is-linear,beyond-training-length,position-vs-content` (the HTML report is `lab-report/index.html`; its top-right button switches the language). The explorer: `posenc explore` — pick `sinusoidal` and look at the panels 'The naive way: the index as a coordinate' (section 1), 'Similarity against distance' (section 4: the rises in red) and 'Content against position' (section 7); change d, base or L and every panel is redrawn by the same functions."""),
]
