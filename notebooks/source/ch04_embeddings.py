"""Chapter source for notebooks/{ko,en}/04-ids-vectors-scores.ipynb (built by scripts/build_notebooks.py)."""

from cells import code, exercise, md, setup_cells

SLUG = "04-ids-vectors-scores"

DEMO = {}
DEMO["lookup-is-matmul"] = [
    md(ko="""**코드로**: 번호 하나를 찾는 것은 원-핫 벡터와 표의 곱이다. 둘을 직접 비교하고, posenc 의
`TokenEmbedding(scale=False)` 도 같은 행을 내는지 본다.""",
       en="""**As code**: looking an id up is the product of its one-hot vector with the table. Compare the two directly, and
check that posenc's `TokenEmbedding(scale=False)` gives the same rows."""),
    code("""from posenc.embedding import TokenEmbedding

V, d = 1000, 64
emb = TokenEmbedding(vocab_size=V, dim=d, scale=False)
table = emb.weight.detach()
ids = torch.randint(0, V, (256,))
one_hot = torch.nn.functional.one_hot(ids, V).float()              # (256, V)
by_product = one_hot @ table                                        # «원-핫 × 표|one-hot × table»
assert torch.equal(by_product, table[ids])                          # «비트까지 같다|bit for bit»
torch.testing.assert_close(emb(ids).detach(), by_product)
print(f"«곱의 곱셈-덧셈 수|multiply-adds of the product»: {256 * V * d:,}; «찾기|lookup»: 0")"""),
]
DEMO["lookup-is-matmul-check"] = [
    code("""assert f.values["flops"]["one_hot_matmul"] == 2 * 256 * V * d and f.values["max_difference"] == 0.0"""),
]
DEMO["tying"] = [
    md(ko="""**코드로 — 묶기**: 출력 머리가 임베딩 표를 그대로 쓰면 로짓 = h · Eᵀ 이고, 매개변수는 V·d 만큼 준다.""",
       en="""**As code — tying**: when the output head uses the embedding table itself, logits = h · Eᵀ and V·d parameters
are saved."""),
    code("""head = torch.nn.Linear(d, V, bias=False)
head.weight = emb.weight                                            # «같은 텐서|the same tensor»
h = torch.randn(3, d)
torch.testing.assert_close(head(h), h @ emb.weight.T)
tied = sum(p.numel() for p in {id(p): p for p in [*emb.parameters(), *head.parameters()]}.values())
print(f"«묶음|tied»: {tied:,}, «안 묶음|untied»: {2 * V * d:,}")"""),
]
DEMO["tying-check"] = [
    code("""assert f.values["parameters"] == {"tied": tied, "untied": 2 * V * d}"""),
]
DEMO["sqrt-d"] = [
    md(ko="""**코드로 — ×√d**: `TokenEmbedding(scale=True)` 는 찾은 행에 √d 를 곱한다. 방향은 그대로, 길이만 √d 배.""",
       en="""**As code — ×√d**: `TokenEmbedding(scale=True)` multiplies the rows it looks up by √d: the same direction,
√d times the length."""),
    code("""scaled = TokenEmbedding(vocab_size=V, dim=d, scale=True)
scaled.weight.data.copy_(table)
ratio = scaled(ids).detach().norm(dim=-1) / table[ids].norm(dim=-1)
print(f"«길이 비|length ratio»: {ratio.min().item():.6f} … {ratio.max().item():.6f}, √d = {math.sqrt(d)}")
fig, ax = plt.subplots()
ax.hist([table[ids].norm(dim=-1).numpy(), scaled(ids).detach().norm(dim=-1).numpy()], bins=30,
        label=["«그대로|as stored»", "×√d"])
ax.set_xlabel("«행의 노름|row norm»")
ax.set_ylabel("«개수|count»")
ax.set_title("«√d 를 곱하면 길이가 √d 배|×√d: rows √d times longer»")
ax.legend()
book.show(fig)"""),
]
DEMO["sqrt-d-check"] = [
    code("""torch.testing.assert_close(ratio, torch.full_like(ratio, f.values["sqrt_d"]))"""),
]
DEMO["table-size"] = [
    md(ko="""**코드로**: 표의 수는 모양 (V, d) 의 곱이다. torch 의 `nn.Embedding` 과 posenc 의 `TokenEmbedding` 을
`count_parameters` 로 세어 V·d 와 비교한다.""",
       en="""**As code**: the table holds as many numbers as its shape (V, d) says. Count torch's `nn.Embedding` and posenc's
`TokenEmbedding` with `count_parameters` and compare with V·d."""),
    code("""from posenc.embedding import count_parameters

sizes = {}
for vocab in (1000, 2000, 4000):
    by_hand = torch.nn.Embedding(vocab, d).weight.numel()                    # «(V, d) 표의 수|numbers in a (V, d) table»
    sizes[vocab] = count_parameters(TokenEmbedding(vocab_size=vocab, dim=d))
    assert by_hand == sizes[vocab] == vocab * d
    print(f"V = {vocab}: {sizes[vocab]:,} = {vocab} × {d}")"""),
]
DEMO["table-size-check"] = [
    code("""assert list(sizes.values()) == f.values["parameters"]  # «실험실과 같은 수|the lab's counts»"""),
]
DEMO["self-score"] = [
    md(ko="""**코드로**: 실험실과 같은 표(seed 0, V = 1000)에서 h = 토큰 i 의 행이면 로짓은 표 · h 다. 자기 자신과의 내적
|e_i|² 이 다른 모든 행과의 내적보다 큰지를 토큰마다 보고, 행 길이를 exp(σz) 로 퍼뜨리며 비율을 센다. 코사인은 길이를 나눠 버린다.""",
       en="""**As code**: on the lab's table (seed 0, V = 1000), with h = token i's row the logits are table · h. For every
token, is its product with itself, |e_i|², above its product with every other row? Count it as the row lengths spread by
exp(σz). Cosine divides the lengths out."""),
    code("""torch.manual_seed(0)                                                  # «실험실의 표|the lab's table»
rows = TokenEmbedding(vocab_size=V, dim=d).weight.detach().double()      # (V, d)
z = torch.randn(V, 1, generator=torch.Generator().manual_seed(91), dtype=torch.float64)
sigmas, own_dot, own_cos = [0.0, 0.1, 0.25, 0.5, 1.0], [], []
for sigma in sigmas:
    t = rows * torch.exp(sigma * z)                                      # «방향은 그대로, 길이만 퍼진다|same directions, spread lengths»
    scores = t @ t.T                                                     # «행 i: h = e_i 의 로짓|row i: the logits for h = e_i»
    own = scores.diagonal()                                              # |e_i|²
    others = scores.masked_fill(torch.eye(V, dtype=torch.bool), float("-inf")).amax(-1)
    own_dot.append((own > others).double().mean().item())
    u = torch.nn.functional.normalize(t, dim=-1)
    own_cos.append(((u @ u.T).argmax(-1) == torch.arange(V)).double().mean().item())
    print(f"σ = {sigma:4}: «내적에서 자기 행이 1등|own row first by dot» {own_dot[-1]:.3f}, «코사인에서|by cosine» {own_cos[-1]:.3f}")
fig, ax = plt.subplots()
ax.plot(sigmas, own_dot, marker="o", label="«내적|dot product»")
ax.plot(sigmas, own_cos, marker="s", label="«코사인|cosine»")
ax.set_xlabel("«행 길이의 퍼짐 σ|row-length spread σ»")
ax.set_ylabel("«자기 행이 1등인 비율|own row on top»")
ax.set_title("«길이가 퍼지면 더 긴 행이 이긴다|spread lengths: a longer row wins»")
ax.legend()
book.show(fig)"""),
]
DEMO["self-score-check"] = [
    code("""assert own_dot == f.values["self_top_fraction"] and own_cos == f.values["cosine_self_top_fraction"]  # «실험실과 같은 비율|the lab's fractions»"""),
]
DEMO["cosine-vs-dot"] = [
    md(ko="""**코드로**: 실험실의 표(V = 200)에서 한 행을 늘이고, 이웃 목록을 두 잣대로 직접 만든다 — 코사인(방향만)과 내적.
posenc 의 `neighbours` 가 같은 목록을 내는지 모든 토큰에서 확인한다.""",
       en="""**As code**: stretch one row of the lab's table (V = 200) and build the neighbour lists by hand with both
measures — cosine (direction only) and dot product. Check on every token that posenc's `neighbours` gives the same lists."""),
    code("""from posenc.embedding import neighbours

torch.manual_seed(1)                                                     # «실험실의 표 (V = 200)|the lab's table (V = 200)»
small = TokenEmbedding(vocab_size=200, dim=d).weight.detach().double()
sid = int(torch.randint(0, 200, (1,), generator=torch.Generator().manual_seed(101)))   # «늘일 행|the row to stretch»


def nearest(t, i, metric, k=5):
    u = t if metric == "dot" else torch.nn.functional.normalize(t, dim=-1)
    s = u @ u[i]
    s[i] = float("-inf")                                                 # «자기 자신은 빼고|not itself»
    return s.topk(k).indices.tolist()


probes = [i for i in range(200) if i != sid][:100]
aligned = [i for i in probes if torch.nn.functional.cosine_similarity(small[i], small[sid], dim=0) > 0]
led, cos_changed = {}, {}
for factor in (2.0, 10.0, 100.0):
    stretched = small.clone()
    stretched[sid] *= factor
    for t in (small, stretched):
        for metric in ("cosine", "dot"):
            assert all(nearest(t, i, metric) == neighbours(t, i, k=5, metric=metric)[0].tolist() for i in range(200))
    cos_changed[factor] = sum(nearest(small, i, "cosine") != nearest(stretched, i, "cosine") for i in [sid, *probes])
    led[factor] = sum(nearest(stretched, i, "dot", k=1) == [sid] for i in aligned) / len(aligned)
    print(f"×{factor:g}: «바뀐 코사인 목록|cosine lists changed» {cos_changed[factor]}, "
          f"«늘인 행이 내적 목록의 맨 앞|stretched row leads the dot list» {led[factor]:.3f}")"""),
    code("""fig, ax = plt.subplots()
ax.plot(list(led), list(led.values()), marker="o", label="«내적: 늘인 행이 1등|dot: stretched row first»")
ax.plot(list(cos_changed), [c / (len(probes) + 1) for c in cos_changed.values()], marker="s",
        label="«코사인: 바뀐 목록|cosine: lists changed»")
ax.set_xscale("log")
ax.set_xlabel("«늘인 배수|stretch factor»")
ax.set_ylabel("«비율|fraction»")
ax.set_title("«한 행을 늘이면|stretching one row»")
ax.legend()
book.show(fig)"""),
]
DEMO["cosine-vs-dot-check"] = [
    code("""assert list(cos_changed.values()) == f.values["cosine_lists_changed"] and list(led.values()) == f.values["dot_led_fraction"]
stretched = small.clone()
stretched[sid] *= f.values["example_factor"]
i = f.values["example_token"]
assert f.values["example_lists"] == {"cosine_before": nearest(small, i, "cosine"), "cosine_after": nearest(stretched, i, "cosine"),
                                     "dot_before": nearest(small, i, "dot"), "dot_after": nearest(stretched, i, "dot")}"""),
]
DEMO["no-context"] = [
    md(ko="""**코드로**: 같은 번호를 세 자리에 둔다 (한 문장의 0 번과 6 번, 다른 문장의 11 번). 임베딩은 표의 그 행 × √d 이고
앞뒤는 보지 않는다. 위치를 더하면 세 벡터가 달라진다.""",
       en="""**As code**: put the same id at three places (positions 0 and 6 of one sentence, 11 of another). Its embedding is
that row of the table × √d and looks at nothing around it; adding positions makes the three vectors differ."""),
    code("""from posenc import positions

torch.manual_seed(0)                                                     # «실험실의 표 (V = 50)|the lab's table (V = 50)»
words = TokenEmbedding(vocab_size=50, dim=d, scale=True)
sentences = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(111))
token = int(sentences[0, 0])
sentences[0, 6] = sentences[1, 11] = token
places = [(0, 0), (0, 6), (1, 11)]
with torch.no_grad():
    x = words(sentences)                                                 # (2, 12, d)
    torch.testing.assert_close(x, words.weight[sentences] * math.sqrt(d))   # «표의 행 × √d|the table's row × √d»
    z = positions.build("sinusoidal", dim=d, num_heads=1).add(x, torch.arange(12))
copies, placed = torch.stack([x[b, t] for b, t in places]), torch.stack([z[b, t] for b, t in places])
same = (copies - copies[0]).abs().max().item()
differ = (placed - placed[0]).abs().max().item()
print(f"«토큰|token» {token}: «세 자리의 최대 차이|largest difference over the three places»: {same}; «위치를 더하면|with positions» {differ:.4f}")"""),
]
DEMO["no-context-check"] = [
    code("""assert same == f.values["max_difference"] == 0.0
torch.testing.assert_close(differ, f.values["max_difference_with_positions"])  # «실험실과 같은 숫자|the lab's number»"""),
]

EXERCISE_CELLS = [
    md(ko="### 연습문제", en="### Exercises"),
    *exercise("04.onehot", ko="`embed(ids, table)` 를 색인 없이 원-핫 곱으로 써라. ids 는 어떤 모양이든 된다.",
              en="Write `embed(ids, table)` as a one-hot product, without indexing. ids may have any shape.",
              stub="def embed(ids, table):\n    ...\n\nanswer = ..."),
    *exercise("04.tied", ko="V = 32000, d = 512 에서 임베딩과 출력 머리를 묶으면 둘의 매개변수는 모두 몇 개인가?",
              en="With V = 32000 and d = 512, how many parameters do the embedding and the output head have together when tied?"),
    *exercise("04.scale", ko="d = 256 인 `TokenEmbedding(scale=True)` 는 행에 무엇을 곱하는가?",
              en="What does `TokenEmbedding(scale=True)` with d = 256 multiply its rows by?"),
]

CELLS = [
    md(ko="""# 임베딩, 묶기, √d: 번호에서 점수까지

이 노트북은 글 003 을 따라간다. 임베딩 표는 번호로 행을 꺼내는 표이고, 출력 쪽 로짓은 같은 모양의 표를 한 번 더 쓰는 곱셈이다. 표의 크기, 가중치 묶기, 내적과 코사인, √d, 그리고 임베딩에 문맥이 없다는 것을 잰다. 표는 어휘 V = 1000 (cosine-vs-dot 은 200), 폭 d = 64 이다.""",
       en="""# Embeddings, tying and √d: from ids to scores

This notebook follows article 003. An embedding table is a table you read a row from by number, and the output logits are one more product with a table of the same shape. We measure the table's size, weight tying, dot product against cosine, √d, and that an embedding has no context. The tables have V = 1000 (200 for cosine-vs-dot) and width d = 64."""),
    *setup_cells("003"),
    md(ko="""### 1. 조회는 곱셈의 지름길

교과서는 '원-핫 벡터에 행렬을 곱한다' 고 쓰고, 코드는 `table[id]` 한 줄이다. 원-핫은 한 자리만 1 이라 곱해서 더하면 그 행만 남는다. 실험실은 둘을 비트 단위로 비교하고, torch 가 센 FLOPs 를 나란히 놓는다: 조회는 0, 곱셈은 2·N·V·d.""",
       en="""### 1. A lookup is a shortcut of a product

Textbooks write 'multiply a one-hot vector by the matrix'; code writes `table[id]`. A one-hot vector has a single 1, so multiplying and summing leaves that one row. The lab compares the two bit for bit and puts the FLOPs torch counts side by side: 0 for the lookup, 2·N·V·d for the product."""),
    *DEMO["lookup-is-matmul"],
    code("""f = course.claim("lookup-is-matmul")
course.show(f, LANG)"""),
    *DEMO["lookup-is-matmul-check"],
    md(ko="""**해 보기** — d 를 128 로: 여전히 비트 단위로 같고, 곱셈의 FLOPs 만 두 배가 된다.""",
       en="""**Try this** — d = 128: still bitwise equal; only the product's FLOPs double."""),
    code("""course.try_this("lookup-is-matmul", dim=128, lang=LANG)"""),
    md(ko="""### 2. 표의 크기는 V·d

표의 모양은 (V, d) 이고 수의 개수는 V·d 다. 폭을 그대로 두고 어휘만 두 배로 하면 표도 두 배가 된다. 실험실은 V = 1000, 2000, 4000 의 파라미터를 센다.""",
       en="""### 2. The table holds V·d numbers

The table is (V, d) and holds V·d numbers; double the vocabulary at the same width and the table doubles. The lab counts the parameters at V = 1000, 2000, 4000."""),
    *DEMO["table-size"],
    code("""f = course.claim("table-size")
course.show(f, LANG)"""),
    *DEMO["table-size-check"],
    md(ko="""**해 보기** — d 를 128 로: 모든 개수가 두 배가 되고, 어휘를 두 배로 할 때의 비율은 여전히 2 다.""",
       en="""**Try this** — d = 128: every count doubles, and doubling V still doubles it."""),
    code("""course.try_this("table-size", dim=128, lang=LANG)"""),
    md(ko="""### 3. 묶기: 같은 표를 한 번 더

출력 헤드는 폭 d 의 벡터를 V 개의 점수로 넓히는 (V, d) 행렬이다 — 입력 표와 같은 모양이다. 묶으면 표가 한 벌이라 V·d, 따로 두면 2·V·d 다. 묶은 로짓 하나는 은닉 벡터와 표의 한 행의 내적이다. 실험실은 둘을 세고, 로짓을 행마다의 내적과 비교한다 (허용치: float32 내적의 반올림 한계).""",
       en="""### 3. Tying: the same table once more

The output head widens a d-vector into V scores with a (V, d) matrix — the input table's shape. Tied, there is one table, V·d; untied, 2·V·d. A tied logit is the dot product of the hidden vector with one row. The lab counts both and compares the logits with explicit row dot products (tolerance: the rounding bound of a float32 dot product)."""),
    *DEMO["tying"],
    code("""f = course.claim("tying")
course.show(f, LANG)"""),
    *DEMO["tying-check"],
    md(ko="""**해 보기** — d 를 1024 로: 개수는 비례해서 커지고, 로짓과 내적의 차이도 커지지만 (길이 d 의 float32 내적이라) 허용치도 d 를 따라 커지므로 여전히 같다고 판정한다.""",
       en="""**Try this** — d = 1024: the counts grow in proportion; the gap between logit and dot product grows too (a float32 dot product of length d), and so does its bound, so they still agree."""),
    code("""course.try_this("tying", dim=1024, lang=LANG)"""),
    md(ko="""### 4. 자기 행이 1등?

은닉 벡터 h 가 어떤 토큰의 임베딩과 같다면, 묶은 로짓에서 그 토큰이 이길까? 자기 자신과의 내적은 길이의 제곱이라 대개 이긴다. 하지만 행의 길이가 제각각이면 더 긴 행이 이길 수 있다. 실험실은 행 길이를 exp(σz) 로 퍼뜨리며 (σ = 0…1) 자기 행이 1등인 비율을 잰다. 코사인에서는 길이가 지워지니 언제나 1 이다.""",
       en="""### 4. Does a token's own row win?

If the hidden vector h equals a token's embedding, does that token win the tied logits? Its product with itself is its squared length, so usually yes — but when row lengths differ a longer row can win. The lab spreads row lengths by exp(σz), σ = 0…1, and measures how often the own row wins; under cosine, where length is divided out, always."""),
    *DEMO["self-score"],
    code("""f = course.claim("self-score")
course.show(f, LANG)"""),
    *DEMO["self-score-check"],
    md(ko="""**해 보기** — d 를 16 으로: 좁은 표에서는 방향이 덜 갈라져서 σ = 0 에서도 자기 행이 덜 이긴다. 그래도 코사인에서는 언제나 이긴다.""",
       en="""**Try this** — d = 16: in a narrow table directions are less distinct, so the own row wins less even at σ = 0; under cosine it still always wins."""),
    code("""course.try_this("self-score", dim=16, lang=LANG)"""),
    md(ko="""### 5. 가까움은 코사인으로, 점수는 내적으로

'이 토큰과 가까운 토큰' 을 내적으로 찾으면 상대의 길이가 섞여 든다. 가장 확실한 확인: 표의 한 행만 몇 배로 늘인다. 그 행의 코사인은 그대로이고 (방향이 그대로다) 내적은 그 배수만큼 커진다. 실험실은 ×2, ×10, ×100 으로 늘이며 코사인 이웃 목록이 바뀌는지, 늘인 행이 그 행이 가리키는 쪽 토큰들의 내적 목록에서 몇 번이나 맨 앞에 서는지 잰다.""",
       en="""### 5. Closeness by cosine, scores by dot product

Finding 'the tokens close to this one' by dot product mixes in the other row's length. The surest check: stretch one row of the table. Its cosines stay (its direction is unchanged) and its dot products grow by the factor. The lab stretches by ×2, ×10, ×100 and measures whether any cosine neighbour list changes and how often the stretched row leads the dot-product lists of the tokens it points towards."""),
    *DEMO["cosine-vs-dot"],
    code("""f = course.claim("cosine-vs-dot")
course.show(f, LANG)"""),
    *DEMO["cosine-vs-dot-check"],
    md(ko="""**해 보기** — d 를 16 으로: 코사인 목록은 여전히 하나도 바뀌지 않고, 늘일수록 늘인 행이 내적 목록의 앞을 더 차지한다.""",
       en="""**Try this** — d = 16: still no cosine list changes, and the more the row is stretched the more dot-product lists it leads."""),
    code("""course.try_this("cosine-vs-dot", dim=16, lang=LANG)"""),
    md(ko="""### 6. √d 를 곱하는 자리

Transformer 논문은 임베딩에 √d 를 곱한다. 모든 칸에 같은 수를 곱하니 방향은 그대로이고 크기만 정확히 √d 배가 된다. 크기가 중요한 것은 위치를 더하는 자리에서다 — 노트북 1 의 7절에서 본 위치와 내용의 경쟁이다. 실험실은 노름의 비와 코사인을 잰다.""",
       en="""### 6. Where √d is multiplied

The Transformer paper multiplies embeddings by √d. Every entry is multiplied by the same number, so the direction stays and the size grows by exactly √d. Size matters where positions are added — the competition of position and content in notebook 1, section 7. The lab measures the norm ratios and the cosines."""),
    *DEMO["sqrt-d"],
    code("""f = course.claim("sqrt-d")
course.show(f, LANG)"""),
    *DEMO["sqrt-d-check"],
    md(ko="""**해 보기** — d 를 1024 로: 비는 √1024 = 32 이고, 코사인은 여전히 1 이다.""",
       en="""**Try this** — d = 1024: the ratio is √1024 = 32 and every cosine is still 1."""),
    code("""course.try_this("sqrt-d", dim=1024, lang=LANG)"""),
    md(ko="""### 7. 임베딩에는 문맥이 없다

같은 번호는 표에서 언제나 같은 행이다. 앞뒤에 무엇이 있든 같다. 같은 낱말이 자리에 따라 다르게 읽히는 것은 뒤의 어텐션이 하는 일이다. 실험실은 한 id 가 여러 자리에 있을 때의 벡터를 비교한다: 위치 없이는 차이가 정확히 0, 위치를 더하면 달라진다.""",
       en="""### 7. An embedding has no context

The same id is always the same row, whatever stands around it; reading a word differently in different places is the later attention's job. The lab compares the vectors of one id at several places: without positions the difference is exactly 0, with positions added they differ."""),
    *DEMO["no-context"],
    code("""f = course.claim("no-context")
course.show(f, LANG)"""),
    *DEMO["no-context-check"],
    md(ko="""**해 보기** — seed 를 바꿔도 차이는 정확히 0 이다. 표는 그저 표다.""",
       en="""**Try this** — another seed: the difference is still exactly 0. A table is just a table."""),
    code("""course.try_this("no-context", seed=4, lang=LANG)"""),
    *EXERCISE_CELLS,
    md(ko="""### 더 보기

명령줄에서 같은 주장들을 한 번에: `posenc lab --lang ko --only lookup-is-matmul,table-size,tying,self-score,cosine-vs-dot,sqrt-d,no-context` (HTML 보고서는 `lab-report/index.html`, 오른쪽 위 단추로 언어를 바꾼다). 탐색기: `posenc explore` — 탐색기에는 임베딩 패널이 없지만 √d 는 볼 수 있다: 설정의 '내용 크기' 칸(비우면 √d/4)에 √d (d = 64 에서 8) 를 넣으면 '내용과 위치의 경쟁' 패널에서 위치가 어텐션을 덜 움직인다.""",
       en="""### Further

The same claims from the command line: `posenc lab --lang en --only lookup-is-matmul,table-size,tying,self-score,cosine-vs-dot,sqrt-d,no-context` (the HTML report is `lab-report/index.html`; its top-right button switches the language). The explorer: `posenc explore` — the explorer has no embedding panel, but √d shows: set 'Content scale' in the settings (empty: √d/4) to √d (8 at d = 64) and in 'Content against position' the positions move attention less."""),
]
