"""Chapter source for notebooks/{ko,en}/02-what-position-breaks.ipynb (built by scripts/build_notebooks.py)."""

from cells import code, exercise, md, setup_cells

SLUG = "02-what-position-breaks"

DEMO = {}
DEMO["encoder-decoder-causal"] = [
    md(ko="""**코드로**: 인과 마스크는 j > i 인 키의 로짓을 −∞ 로 만드는 하위 삼각 행렬 하나다. 직접 쓴 마스크 어텐션과
posenc 의 `MultiHeadAttention(…)(x, causal=True)` 가 같은 출력을 내는지, 그리고 뒤 토큰을 바꾸면 앞의 출력이 정확히
그대로인지 본다.""",
       en="""**As code**: the causal mask is one lower-triangular matrix that sets the logits of keys j > i to −∞. Check that
masked attention written by hand and posenc's `MultiHeadAttention(…)(x, causal=True)` give the same output, and that
changing a later token leaves earlier outputs exactly as they were."""),
    code("""from posenc.attention import MultiHeadAttention

T, d, heads = 8, 64, 4
attn = MultiHeadAttention(dim=d, num_heads=heads).eval()
x = torch.randn(1, T, d)
mask = torch.ones(T, T, dtype=torch.bool).tril()                    # «i 는 j ≤ i 만 본다|i sees j ≤ i only»

def by_hand(x):
    q, k, v = (lin(x).view(1, T, heads, d // heads).transpose(1, 2) for lin in (attn.q_proj, attn.k_proj, attn.v_proj))
    logits = q @ k.transpose(-1, -2) / math.sqrt(d // heads)
    weights = logits.masked_fill(~mask, float("-inf")).softmax(-1)
    return attn.out_proj((weights @ v).transpose(1, 2).reshape(1, T, d))

with torch.no_grad():
    out, _ = attn(x, causal=True)
    torch.testing.assert_close(by_hand(x), out)                     # «posenc 와 같다|the same as posenc»
    y = x.clone()
    y[0, -1] += 10.0                                                # «마지막 토큰만 바꾼다|change the last token only»
    changed = (attn(y, causal=True)[0] - out).abs().amax(-1)[0]
print("«위치별 출력 변화|output change per position»:", [f"{c:.3g}" for c in changed.tolist()])"""),
    code("""fig, ax = plt.subplots(figsize=(3.4, 3.2))
ax.imshow(mask, cmap="Greys")
ax.set_xlabel("«키 j|key j»")
ax.set_ylabel("«질의 i|query i»")
ax.set_title("«인과 마스크|causal mask»")
book.show(fig)"""),
]
DEMO["encoder-decoder-causal-check"] = [
    code("""assert changed[:-1].max().item() == f.values["max_change_before"] == 0.0  # «앞선 출력: 정확히 0|earlier outputs: exactly 0»"""),
]
DEMO["permutation"] = [
    md(ko="""**코드로**: 위치 없는 셀프 어텐션을 직접 쓴다 (posenc 의 `MultiHeadAttention` 의 가중치로, 결과가 같은지 확인).
입력의 행을 순열 π 로 섞고, 출력이 같은 π 로 섞이는지 — att(X[π]) = att(X)[π] — 세 경우에서 잰다.""",
       en="""**As code**: write self-attention without positions by hand (with the weights of posenc's `MultiHeadAttention`,
checking that both give the same output). Shuffle the input rows by a permutation π and measure whether the output is
shuffled the same way — att(X[π]) = att(X)[π] — in the three cases."""),
    code("""from posenc import positions
from posenc.attention import MultiHeadAttention

T, d, heads = 6, 64, 4
attn = MultiHeadAttention(dim=d, num_heads=heads).double().eval()


def attention(z):                                                # «위치 없는 셀프 어텐션|self-attention, no positions»
    q, k, v = (lin(z).view(1, T, heads, d // heads).transpose(1, 2) for lin in (attn.q_proj, attn.k_proj, attn.v_proj))
    weights = (q @ k.transpose(-1, -2) / math.sqrt(d // heads)).softmax(-1)
    return attn.out_proj((weights @ v).transpose(1, 2).reshape(1, T, d))


x = torch.randn(1, T, d, dtype=torch.float64)
pe = positions.build("sinusoidal", dim=d, num_heads=heads).encode(torch.arange(T))[None]   # (1, T, d)
perm = torch.tensor([3, 4, 1, 0, 5, 2])                          # π
with torch.no_grad():
    torch.testing.assert_close(attention(x), attn(x)[0])         # «posenc 와 같다|the same as posenc»
    z = x + pe
    gaps = {"no_position": (attention(x[:, perm]) - attention(x)[:, perm]).abs().max().item(),
            "position_fixed": (attention(x[:, perm] + pe) - attention(z)[:, perm]).abs().max().item(),
            "position_travels": (attention(z[:, perm]) - attention(z)[:, perm]).abs().max().item()}
for case, gap in gaps.items():
    print(f"{case:17} max |att(X[π]) − att(X)[π]| = {gap:.3g}")"""),
    code("""fig, ax = plt.subplots()
ax.bar(["«위치 없음|none»", "«위치 제자리|positions fixed»", "«위치가 따라감|positions travel»"],
       [math.log10(max(g, 1e-18)) for g in gaps.values()])
ax.set_ylabel("log10 max |att(X[π]) - att(X)[π]|")
ax.set_title("«등변성: 반올림 수준이면 성립|equivariance: holds at rounding level»")
book.show(fig)"""),
]
DEMO["permutation-check"] = [
    code("""tol = f.values["tolerance"]  # «다른 무작위 가중치, 같은 세 답|other random weights, the same three answers»
assert {case: gap <= tol for case, gap in gaps.items()} == {case: f.values[case] for case in gaps}"""),
]

EXERCISE_CELLS = [
    md(ko="### 연습문제", en="### Exercises"),
    *exercise("02.mask", ko="`causal_mask(n)` 을 써라: 질의 i 가 키 j 를 볼 수 있으면 True 인 (n, n) bool 텐서.",
              en="Write `causal_mask(n)`: the (n, n) bool tensor that is True where query i may see key j.",
              stub="def causal_mask(n):\n    ...\n\nanswer = ..."),
    *exercise("02.pairs", ko="길이 10 인 디코더에서 인과 마스크가 남기는 (질의, 키) 짝은 몇 개인가?",
              en="How many (query, key) pairs does the causal mask keep in a decoder of length 10?"),
]

CELLS = [
    md(ko="""# 위치가 깨뜨리는 것: 순열과 디코더 마스크

이 노트북은 글 001 을 따라간다. 셀프 어텐션은 모든 토큰을 한 번에 보기 때문에 순서를 잃는다. 그래서 위치 인코딩을 더하고, 그 입력으로 인코더와 디코더를 조립한다. 여기서는 두 주장을 잰다: 위치가 없으면 어텐션은 순서를 모른다는 것 (그리고 위치를 더하면 그것이 깨진다는 것), 디코더의 마스크가 미래를 가린다는 것.""",
       en="""# What position breaks: permutation and the decoder's mask

This notebook follows article 001. Self-attention looks at all tokens at once, so it loses their order; a positional encoding is added, and the encoder and decoder are built on top. Two claims are measured here: without positions attention knows no order (and adding positions breaks that), and the decoder's mask hides the future."""),
    *setup_cells("001"),
    md(ko="""### 1. 위치 없는 어텐션은 순서를 모른다

“개가 사람을 문다” 와 “사람이 개를 문다” 는 같은 토큰들의 다른 순서다. 위치가 없으면 셀프 어텐션은 입력을 섞은 만큼 출력도 똑같이 섞을 뿐이라(순열 등변), 두 문장을 가려내지 못한다. 실험실은 세 경우를 잰다: 위치 없음, 위치는 제자리에 두고 토큰만 섞음, 위치가 토큰을 따라 함께 섞임. 답은 등변, 아님, 다시 등변이다. 세 번째가 핵심이다: 자리표를 토큰에 붙여 들고 다니면 실제로는 아무것도 옮긴 것이 아니다.""",
       en="""### 1. Attention without positions knows no order

“dog bites man” and “man bites dog” are the same tokens in another order. Without positions self-attention shuffles its output exactly as its input was shuffled (permutation equivariance), so it cannot tell the two apart. The lab measures three cases: no positions; positions left in place while the tokens move; positions moving with their tokens. The answers: equivariant, not, equivariant again. The third is the point: a position label that travels with its token has not moved anything."""),
    *DEMO["permutation"],
    code("""f = course.claim("permutation")
course.show(f, LANG)"""),
    *DEMO["permutation-check"],
    md(ko="""**해 보기** — seed 를 바꾸면 토큰도 가중치도 다르지만 세 답은 같다. 등변성은 숫자가 아니라 연산의 성질이다.""",
       en="""**Try this** — another seed: other tokens, other weights, the same three answers. Equivariance is a property of the operation, not of the numbers."""),
    code("""course.try_this("permutation", seed=5, lang=LANG)"""),
    md(ko="""### 위치가 들어가는 세 자리

위치를 넣는 곳은 셋이다: 토큰에 더하기(사인파, 학습형 표), 질의와 키를 돌리기(RoPE), 어텐션 로짓에 바이어스 더하기(ALiBi, T5). posenc 의 레지스트리는 등록된 방식마다 그 계열을 안다.""",
       en="""### Three places a position acts

A position can act in three places: added to the tokens (the sinusoid, a learned table), rotating queries and keys (RoPE), or biasing the attention logits (ALiBi, T5). posenc's registry knows each registered scheme's family."""),
    code("""from posenc import positions

for name in positions.names():
    print(f"{name:18} {positions.lookup(name).family}")"""),
    md(ko="""### 2. 디코더: 미래를 가린 채

디코더는 목표 문장을 한 토큰씩 만들어 가므로 자기보다 뒤의 토큰을 보면 안 된다 — 정답을 보고 푸는 셈이다. 마스크드 셀프 어텐션은 그 점수를 −∞ 로 가린다. 실험실은 2 + 2 층 인코더–디코더(사인파 위치)와 디코더 전용 모델에서 목표 토큰 t 를 바꿔, t 보다 앞선 출력이 정확히 0 만큼 움직이는지 본다. 크로스 어텐션도 잰다: 원문의 마지막 토큰을 바꾸면 인코더의 첫 출력도, 디코더의 모든 출력도 움직여야 한다 — 인코더는 가리지 않고, 디코더는 원문 전체를 본다.""",
       en="""### 2. The decoder: the future masked

The decoder writes the target one token at a time, so it must not look at later tokens — that would be reading the answer. Masked self-attention sets those scores to −∞. In a 2 + 2-layer encoder–decoder (sinusoidal positions) and a decoder-only model the lab changes target token t and checks that no output before t moves, by exactly 0. Cross-attention too: changing the last source token must move the encoder's first output and every decoder output — the encoder is not masked and the decoder sees the whole source."""),
    *DEMO["encoder-decoder-causal"],
    code("""f = course.claim("encoder-decoder-causal")
course.show(f, LANG)"""),
    *DEMO["encoder-decoder-causal-check"],
    md(ko="""**해 보기** — seed 를 바꾸면 가중치와 토큰이 다르지만, 앞선 출력의 변화는 여전히 정확히 0 이다. 마스크는 근사가 아니라 구조다.""",
       en="""**Try this** — another seed: other weights and tokens, and the earlier outputs still move by exactly 0. The mask is structure, not an approximation."""),
    code("""course.try_this("encoder-decoder-causal", seed=3, lang=LANG)"""),
    *EXERCISE_CELLS,
    md(ko="""### 더 보기

명령줄에서 같은 주장들을 한 번에: `posenc lab --lang ko --only permutation,encoder-decoder-causal` (HTML 보고서는 `lab-report/index.html`, 오른쪽 위 단추로 언어를 바꾼다). 탐색기: `posenc explore` — '내용과 위치의 경쟁' 패널에서 방식을 `none` 과 `sinusoidal` 사이로 바꿔 본다. `none` 에서는 토큰 0 의 어텐션이 내용만 따른다.""",
       en="""### Further

The same claims from the command line: `posenc lab --lang en --only permutation,encoder-decoder-causal` (the HTML report is `lab-report/index.html`; its top-right button switches the language). The explorer: `posenc explore` — in the 'Content against position' panel switch the scheme between `none` and `sinusoidal`: with `none`, token 0's attention follows content only."""),
]
