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
    code("""f = course.claim("multihead-shapes")
course.show(f, LANG)"""),
    md(ko="""**해 보기** — seed 를 바꿔도 모양과 정확한 0 은 그대로다. 남는 차이(`masked_keys_effect`)는 반올림뿐이다.""",
       en="""**Try this** — another seed: the same shapes and the same exact zero; what is left (`masked_keys_effect`) is rounding."""),
    code("""course.try_this("multihead-shapes", seed=2, lang=LANG)"""),
    md(ko="""### 2. CNN, RNN, 셀프 어텐션의 비용

d2l 은 세 구조를 계산량, 순차 연산 수, 최대 경로 길이로 비교한다. 실험실은 각 구조의 실제 층 하나(Conv1d k = 3, RNNCell 반복, 라이브러리의 어텐션)를 n = 32…256 에서 잰다: torch 가 센 FLOPs 와 그 log-log 기울기, autograd 의 가장 긴 사슬(병렬 하드웨어로도 줄일 수 없는 순차 단계), 입력 n−1 에서 출력 0 까지의 경로. 벽시계 시간은 그림에만 있다.""",
       en="""### 2. The cost of CNN, RNN and self-attention

d2l compares the three by computation, sequential operations and maximum path length. The lab measures one real layer of each (Conv1d with k = 3, an RNNCell loop, the library's attention) at n = 32…256: the FLOPs torch counts and their log-log slope, autograd's longest chain (the sequential steps no parallel hardware shortens), and the path from input n−1 to output 0. Wall times are in the figure only."""),
    code("""f = course.claim("complexity")
course.show(f, LANG)"""),
    md(ko="""**해 보기 — 여기서 주장이 깨진다.** d = 256 이면 n = 32…256 어디에서도 n 이 d 보다 크지 않다. 어텐션의 투영(n·d²)이 n²·d 부분보다 커서 FLOPs 가 거의 선형으로 자라고(기울기 약 1.26), '어텐션의 기울기가 나머지보다 0.3 이상 크다' 는 규칙이 깨진다. O(n²·d) 는 n 이 클 때의 이야기다. n < d 에서는 어텐션도 다른 층보다 더 제곱으로 자라지 않는다. 경로 길이와 순차 단계는 그대로다.""",
       en="""**Try this — here the claim stops holding.** With d = 256, n = 32…256 never exceeds d: attention's projections (n·d²) outweigh its n²·d part, its FLOPs grow almost linearly (slope about 1.26) and the rule 'attention's slope exceeds the others' by more than 0.3' fails. O(n²·d) is about large n; below n = d attention grows no faster than the others. Path lengths and sequential steps do not change."""),
    code("""course.try_this("complexity", dim=256, lang=LANG)"""),
    md(ko="""### 3. 모듈로서의 위치 인코딩

d2l 처럼 영(0) 입력 (2, 60, d/2) 에 사인파 표를 더하고 드롭아웃 p = 0.1 을 건다. 모양은 그대로이고, 드롭아웃은 약 p 만큼을 0 으로 만든다. 열 짝마다 60 위치에서 부호가 몇 번 바뀌는지 세면 앞쪽 열일수록 많다 — 이진수의 아랫자리 비트가 더 자주 바뀌는 것과 같다. 그림: 열 6–9, 그리고 표 전체의 히트맵.""",
       en="""### 3. The encoding as a module

As in d2l: the sinusoid table added to a zero (2, 60, d/2) input, with dropout p = 0.1. The shape is unchanged and dropout zeroes about p of the entries. Counting the sign changes of each column pair over 60 positions, lower columns change more often — as the low bits of a binary number flip most often. Figures: columns 6–9 and the heat map of the whole table."""),
    code("""f = course.claim("pe-module")
course.show(f, LANG)"""),
    md(ko="""**해 보기** — d 를 128 로: 입력이 (2, 60, 64) 가 되고 주파수 짝이 많아져도, 부호 바뀜은 여전히 앞 열에서 뒤 열로 갈수록 줄어든다.""",
       en="""**Try this** — d = 128: the input becomes (2, 60, 64) and there are more frequency pairs; the sign changes still fall from lower to higher columns."""),
    code("""course.try_this("pe-module", dim=128, lang=LANG)"""),
    md(ko="""### 4. 연습문제 1: 층을 쌓으면

위치를 입력에 한 번만 더하고 어텐션 층을 여러 개 쌓으면 어떤 문제가 생길까? 어텐션은 토큰들의 가중 평균이라, 층마다 토큰들이 서로 닮아 간다. 실험실은 무작위 어텐션 층 0…16 개를 지난 은닉 상태에서 릿지 프로브가 위치를 얼마나 읽는지 잰다 — 잔차 연결 없이, 그리고 pre-norm 잔차 연결과 함께.""",
       en="""### 4. Exercise 1: stacking layers

What goes wrong when the position is added once and many attention layers are stacked? Attention is a weighted average of tokens, so with every layer the tokens grow alike. The lab measures how well a ridge probe reads the position from the hidden states after 0…16 random attention layers — without residual connections, and with pre-norm residuals."""),
    code("""f = course.claim("exercises-depth")
course.show(f, LANG)"""),
    md(ko="""**해 보기** — d 를 16 으로: 좁은 모델에서는 처음부터 프로브가 덜 읽는다. 그래도 잔차 연결은 그것을 지키고, 잔차가 없으면 여전히 우연 수준으로 무너진다.""",
       en="""**Try this** — d = 16: in a narrow model the probe reads less from the start; residuals still keep it, and without them it still collapses to chance."""),
    code("""course.try_this("exercises-depth", dim=16, lang=LANG)"""),
    md(ko="""### 5. 연습문제 2: 학습형 위치

위치마다 벡터 하나를 학습하는 표를 만들 수 있을까? 실험실은 '바로 앞 토큰 베끼기' 과제에서 인코더 한 층을 150 걸음 학습한다 (위치 16 개). 학습형 표, 사인파, 위치 없음을 나란히 비교한다. 학습형 표는 과제를 풀지만, 16 번째 위치 너머의 행은 없다.""",
       en="""### 5. Exercise 2: learned positions

Can each position get a learned vector? The lab trains one encoder layer for 150 steps on copy-the-previous-token with 16 positions: a learned table, the sinusoid and no positions side by side. The learned table solves the task, and has no row beyond its 16 positions."""),
    code("""f = course.claim("exercises-learned")
course.show(f, LANG)"""),
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
