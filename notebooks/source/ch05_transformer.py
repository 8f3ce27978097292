"""Chapter source for notebooks/{ko,en}/05-transformer-from-parts.ipynb (built by scripts/build_notebooks.py)."""

from cells import code, exercise, md, setup_cells

SLUG = "05-transformer-from-parts"

CELLS = [
    md(ko="""# 부품으로 만드는 트랜스포머

앞의 네 노트북에서 잰 부품을 하나로 잇는다: 번호 → 임베딩 → ×√d → 위치 방식 → 어텐션 → 블록 → 묶인 출력 머리.
posenc 의 과제(`posenc.tasks`)로 잠깐 학습하고, 위치 방식만 바꾼 같은 모델과 비교해 학습 길이 밖에서 무엇이 달라지는지 본다.""",
       en="""# A Transformer from its parts

The parts measured in the first four notebooks, joined: ids → embedding → ×√d → a position scheme → attention →
blocks → a tied output head. We train it briefly on a task from `posenc.tasks`, then the same model with another
position scheme, and look at what changes past the training length."""),
    *setup_cells("003 + 002"),
    md(ko="""### 1. 과제: 베끼기

`copy` 과제는 기호 n 개를 보여 주고 그대로 다시 쓰게 한다. 디코더 하나로 읽는 틀은
`<bos> s1 … sn <sep> t1 … tn <eos>` 이고, 점수는 답 부분에서만 매긴다. 학습은 n = 2…8, 평가는 n = 16 까지.""",
       en="""### 1. The task: copy

The `copy` task shows n symbols and asks for them again. Framed for one decoder it reads
`<bos> s1 … sn <sep> t1 … tn <eos>`, scored on the answer only. We train on n = 2…8 and evaluate up to n = 16."""),
    code("""from posenc import tasks

task = tasks.build_task("copy")
vocab = task.vocab()
gen = torch.Generator().manual_seed(0)
batch = tasks.collate([task.sample(4, gen)], vocab, "decoder")
print("ids   :", batch.ids[0].tolist())
print("labels:", batch.labels[0].tolist(), f"(«채점하지 않는 자리|not scored» = {tasks.IGNORE})")
print(f"«어휘 크기|vocabulary size»: {len(vocab)}")"""),
    md(ko="""### 2. 부품을 잇는다

`TokenEmbedding(scale=True)` 가 번호를 벡터로 바꾸고 √d 를 곱한다. 더하는 방식(사인파)은 입력에 한 번 더하고,
회전 방식(RoPE)은 어텐션 안에서 질의와 키를 돌린다 — `MultiHeadAttention(position=…)` 이 방식의 종류를 보고 알아서 한다.
블록은 정규화 → 어텐션 → 잔차, 정규화 → 피드포워드 → 잔차. 출력 머리는 임베딩 표를 그대로 쓴다(묶기).""",
       en="""### 2. Joining the parts

`TokenEmbedding(scale=True)` turns ids into vectors and multiplies by √d. An additive scheme (the sinusoid) is added
to the input once; a rotary one (RoPE) turns queries and keys inside attention — `MultiHeadAttention(position=…)`
looks at the scheme's family and does the right thing. A block is norm → attention → residual, norm → feed-forward →
residual. The output head is the embedding table itself (tying)."""),
    code("""from torch import nn

from posenc import positions
from posenc.attention import MultiHeadAttention
from posenc.embedding import TokenEmbedding


class Block(nn.Module):
    def __init__(self, d, heads, scheme):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = MultiHeadAttention(dim=d, num_heads=heads, position=scheme)
        self.ffn = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

    def forward(self, x, pos):
        x = x + self.attn(self.norm1(x), q_pos=pos, k_pos=pos, causal=True)[0]
        return x + self.ffn(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, scheme_name, vocab_size, d=32, heads=2, layers=2):
        super().__init__()
        self.embed = TokenEmbedding(vocab_size=vocab_size, dim=d, scale=True)   # ids → vectors, ×√d
        self.scheme = positions.build(scheme_name, dim=d, num_heads=heads, causal=True)
        self.blocks = nn.ModuleList(Block(d, heads, self.scheme) for _ in range(layers))
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        x = self.embed(ids)
        if self.scheme.family == "additive":                                     # «사인파: 입력에 더한다|sinusoid: added to the input»
            x = self.scheme.add(x, pos)
        for block in self.blocks:
            x = block(x, pos)
        return self.norm(x) @ self.embed.weight.T                               # «묶인 머리|tied head»


torch.manual_seed(0)
model = TinyLM("sinusoidal", len(vocab))
print(f"«매개변수|parameters»: {sum(p.numel() for p in model.parameters()):,}")
print("«출력 머리가 더한 매개변수|parameters the head adds»: 0 («임베딩 표를 다시 쓴다|it reuses the embedding table»)")"""),
    md(ko="""### 3. 학습

AdamW 로 잠깐 학습한다 (CPU 한 스레드에서 십여 초; 길게 돌리려면 `STEPS` 를 키운다). 매 단계의 배치는 단계 번호로 정해지므로
같은 코드는 같은 모델을 만든다.""",
       en="""### 3. Training

A short AdamW run (some ten seconds on one CPU thread; raise `STEPS` for a longer one). Each step's batch is fixed
by its step number, so the same code trains the same model."""),
    code("""STEPS, BATCH, TRAIN_LENGTHS = 300, 32, range(2, 9)


def train(model, steps=STEPS):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 + step)
        lengths = torch.randint(TRAIN_LENGTHS.start, TRAIN_LENGTHS.stop, (BATCH,), generator=g).tolist()
        b = tasks.collate([task.sample(n, g) for n in lengths], vocab, "decoder")
        loss, count = tasks.loss_sum(model, b)
        opt.zero_grad()
        (loss / count).backward()
        opt.step()
        losses.append(loss.item() / count)
    return losses


def accuracy(model, n, examples=64):
    g = torch.Generator().manual_seed(7 + n)
    b = tasks.collate([task.sample(n, g) for _ in range(examples)], vocab, "decoder")
    model.eval()
    acc = tasks.correct(model, b).float().mean().item()
    model.train()
    return acc


torch.manual_seed(0)
sinusoidal = TinyLM("sinusoidal", len(vocab))
losses = {"sinusoidal": train(sinusoidal)}
print(f"«마지막 손실|final loss»: {losses['sinusoidal'][-1]:.3f}")"""),
    md(ko="""### 4. 같은 모델, 다른 위치 방식

이번에는 RoPE. 바뀌는 것은 `positions.build` 에 주는 이름 하나뿐이다.""",
       en="""### 4. The same model, another scheme

Now RoPE. The only change is the name given to `positions.build`."""),
    code("""torch.manual_seed(0)
rope = TinyLM("rope", len(vocab))
losses["rope"] = train(rope)
LENGTHS = list(range(2, 17))
acc = {name: [accuracy(m, n) for n in LENGTHS] for name, m in (("sinusoidal", sinusoidal), ("rope", rope))}
for name in acc:
    inside = sum(acc[name][: len(TRAIN_LENGTHS)]) / len(TRAIN_LENGTHS)
    outside = sum(acc[name][len(TRAIN_LENGTHS):]) / (len(LENGTHS) - len(TRAIN_LENGTHS))
    print(f"{name:10}: «학습 길이 안|inside the training lengths» {inside:.2f}, «밖 (n = 9…16)|beyond (n = 9…16)» {outside:.2f}")"""),
    code("""fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.2))
for name in losses:
    a.plot(losses[name], label=name)
    b.plot(LENGTHS, acc[name], marker="o", label=name)
a.set_xlabel("«단계|step»"); a.set_ylabel("«손실|loss»"); a.set_title("«학습 곡선|training loss»"); a.legend()
b.axvspan(TRAIN_LENGTHS.start, TRAIN_LENGTHS.stop - 1, color="0.9", label="«학습 길이|training lengths»")
b.set_xlabel("«기호 수 n|symbols n»"); b.set_ylabel("«정확도|exact match»"); b.set_title("«학습 길이 밖|beyond the training length»")
b.legend()
book.show(fig)"""),
    md(ko="""학습 길이 밖에서 무엇이 달라지는지가 위치 방식의 몫이다. 같은 정확도 비교를 여러 씨앗과 방식으로 길게 재는 것이
`posenc lengthgen` 이고, 노트북 3 의 `exercises-relative` 는 같은 질문을 이동(shift)으로 묻는다.""",
       en="""What changes past the training length is the position scheme's doing. `posenc lengthgen` measures the same
comparison over seeds and schemes at length, and notebook 3's `exercises-relative` asks the same question with a shift."""),
    md(ko="""### 5. posenc 의 완성 모델과 비교

`posenc.build_decoder_only` 는 같은 부품으로 만든 모델이다. `describe()` 가 무엇을 이었는지 말해 준다.""",
       en="""### 5. posenc's own model

`posenc.build_decoder_only` is a model of the same parts; `describe()` says what it joined."""),
    code("""from posenc import ModelConfig, build_decoder_only

ready = build_decoder_only(ModelConfig(vocab_size=len(vocab), dim=32, num_heads=2, num_layers=2, position="rope"))
info = ready.describe()
print(info["position"])
print(info["embeddings"])
assert info["embeddings"]["tied_output"] and math.isclose(info["embeddings"]["scaled_by"], math.sqrt(32))
print(f"«매개변수|parameters»: {info['parameters']:,} (TinyLM: {sum(p.numel() for p in rope.parameters()):,})")"""),
    md(ko="### 연습문제", en="### Exercises"),
    *exercise("05.head", ko="`tied_logits(h, table)` 를 써라: 은닉 상태 h (…, d) 와 임베딩 표 (V, d) 로 로짓 (…, V).",
              en="Write `tied_logits(h, table)`: logits (…, V) from hidden states h (…, d) and the embedding table (V, d).",
              stub="def tied_logits(h, table):\n    ...\n\nanswer = ..."),
    *exercise("05.head-params", ko="위 TinyLM 에서 묶인 출력 머리가 더하는 매개변수는 몇 개인가?",
              en="How many parameters does the tied output head add to TinyLM above?"),
]
