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

    def forward(self, ids, offset=0):
        pos = torch.arange(ids.shape[1]) + offset                               # «offset: 자리를 통째로 민다|offset: shift every position»
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

AdamW 로 학습한다: 학습률은 `WARMUP` 걸음 동안 0 에서 `LR` 까지 곧게 오르고, 그 뒤 코사인으로 0 까지 내려간다. 기울기 노름은 1 로 자른다.
매 단계의 배치는 단계 번호로 정해지므로 같은 코드는 같은 모델을 만든다. 모델 하나에 CPU 한 스레드로 수십 초가 걸린다 (셀이 잰 시간을 찍는다).""",
       en="""### 3. Training

AdamW: the learning rate climbs linearly from 0 to `LR` over `WARMUP` steps, then follows a cosine down to 0; gradients
are clipped to norm 1. Each step's batch is fixed by its step number, so the same code trains the same model. One model
takes some tens of seconds on one CPU thread (the cell prints the time it took)."""),
    code("""import time

STEPS, BATCH, LR, WARMUP, TRAIN_LENGTHS = 2000, 32, 3e-3, 100, range(2, 9)


def train(model, steps=STEPS):
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    warmup_cosine = lambda s: min(1.0, (s + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * s / steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
    losses, start = [], time.process_time()
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 + step)
        lengths = torch.randint(TRAIN_LENGTHS.start, TRAIN_LENGTHS.stop, (BATCH,), generator=g).tolist()
        b = tasks.collate([task.sample(n, g) for n in lengths], vocab, "decoder")
        loss, count = tasks.loss_sum(model, b)
        opt.zero_grad()
        (loss / count).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        losses.append(loss.item() / count)
    print(f"{steps} «걸음|steps»: {time.process_time() - start:.1f} s CPU")
    return losses


def accuracy(model, n, examples=64, offset=0):
    \"\"\"(exact match, «답의 자리마다 맞힌 비율|fraction right at each answer position») on n-symbol examples.\"\"\"
    g = torch.Generator().manual_seed(7 + n)
    b = tasks.collate([task.sample(n, g) for _ in range(examples)], vocab, "decoder")
    model.eval()
    with torch.no_grad():
        right = model(b.ids, offset).argmax(-1) == b.labels                   # (examples, 2n + 1)
        exact = (right | (b.labels == tasks.IGNORE)).all(dim=1)               # «답 전체와 <eos> 가 맞았나|whole answer and <eos> right»
        if offset == 0:
            assert torch.equal(exact, tasks.correct(model, b))               # «posenc 의 채점과 같다|posenc's scoring agrees»
    model.train()
    return exact.float().mean().item(), right[:, n + 1 : 2 * n + 1].float().mean(0)


torch.manual_seed(0)
sinusoidal = TinyLM("sinusoidal", len(vocab))
losses = {"sinusoidal": train(sinusoidal)}
print(f"«마지막 손실|final loss»: {losses['sinusoidal'][-1]:.4f}")"""),
    md(ko="""### 4. 같은 모델, 다른 위치 방식

이번에는 RoPE. 바뀌는 것은 `positions.build` 에 주는 이름 하나뿐이다. 그 다음 두 모델을 n = 2…16 에서 잰다: 답 전체가 맞은
비율(정확 일치)과, 답의 자리마다 맞힌 비율. 학습 길이 안에서 둘 다 0.9 이상인지 셀이 확인한다.""",
       en="""### 4. The same model, another scheme

Now RoPE. The only change is the name given to `positions.build`. Then both models are measured at n = 2…16: the
fraction of answers entirely right (exact match) and the fraction right at each answer position. The cell checks that
both reach 0.9 inside the training lengths."""),
    code("""torch.manual_seed(0)
rope = TinyLM("rope", len(vocab))
losses["rope"] = train(rope)
LENGTHS = list(range(2, 17))
BEYOND = [n for n in LENGTHS if n not in TRAIN_LENGTHS]
acc, per_place = {}, {}
for name, m in (("sinusoidal", sinusoidal), ("rope", rope)):
    runs = {n: accuracy(m, n) for n in LENGTHS}
    acc[name] = {n: r[0] for n, r in runs.items()}
    per_place[name] = {n: r[1] for n, r in runs.items()}
print("n          " + " ".join(f"{n:5}" for n in LENGTHS))
for name in acc:
    print(f"{name:10} " + " ".join(f"{acc[name][n]:5.2f}" for n in LENGTHS))
inside = {name: sum(acc[name][n] for n in TRAIN_LENGTHS) / len(TRAIN_LENGTHS) for name in acc}
assert min(inside.values()) >= 0.9, inside                                     # «학습 길이는 배웠다|the training lengths are learned»"""),
    code("""for name in acc:
    beyond = [acc[name][n] for n in BEYOND]
    tokens = {n: per_place[name][n].mean().item() for n in BEYOND}
    first_wrong = {n: next((j + 1 for j, r in enumerate(per_place[name][n].tolist()) if r < 0.5), None) for n in BEYOND}
    print(f"{name}: «정확 일치, 학습 길이 안|exact match inside the training lengths» {inside[name]:.2f}; "
          f"«밖 (n = 9…16) 평균|beyond (n = 9…16), mean» {sum(beyond) / len(beyond):.2f}, «최고|best» {max(beyond):.2f} (n = {BEYOND[beyond.index(max(beyond))]})")
    print(f"    «답의 기호를 맞힌 비율|answer symbols right»: n = 9 → {tokens[9]:.2f}, n = 12 → {tokens[12]:.2f}, n = 16 → {tokens[16]:.2f}")
    print(f"    «처음으로 절반 넘게 틀리는 답의 자리|first answer position wrong more than half the time»: "
          + ", ".join(f"n = {n}: {first_wrong[n] if first_wrong[n] else '«없음|none»'}" for n in (9, 12, 16)))"""),
    md(ko="""학습 길이를 넘는 또 하나의 방법: 길이는 학습 때 그대로(n = 2…8) 두고, 모든 자리를 `offset` 만큼 밀어 학습 때 본 적 없는
위치에 놓는다. 밀어도 토큰 사이의 간격은 그대로다.""",
       en="""Another way past the training length: keep the lengths of training (n = 2…8) and shift every position by `offset`,
to positions never seen in training. The offsets between tokens stay as they were."""),
    code("""OFFSETS = [0, 4, 8, 16, 32, 64, 128]
shifted = {name: [sum(accuracy(m, n, offset=o)[0] for n in TRAIN_LENGTHS) / len(TRAIN_LENGTHS) for o in OFFSETS]
           for name, m in (("sinusoidal", sinusoidal), ("rope", rope))}
print("offset     " + " ".join(f"{o:5}" for o in OFFSETS))
for name in shifted:
    print(f"{name:10} " + " ".join(f"{a:5.2f}" for a in shifted[name]))
for name in shifted:
    kept = [o for o, a in zip(OFFSETS, shifted[name]) if a >= 0.9]
    print(f"{name}: «정확 일치 0.9 이상을 지킨 offset|offsets keeping exact match at 0.9 or more»: {kept}; "
          f"offset {OFFSETS[-1]} «에서|at»: {shifted[name][-1]:.2f}")"""),
    code("""fig, ((a, b), (c, e)) = plt.subplots(2, 2, figsize=(9, 6))
for name in losses:
    a.plot(torch.tensor(losses[name]).log10(), label=name, alpha=0.8)
    b.plot(LENGTHS, [acc[name][n] for n in LENGTHS], marker="o", label=name)
    c.plot(range(1, 13), per_place[name][12], marker="o", label=name)
    e.plot(OFFSETS, shifted[name], marker="o", label=name)
a.set_xlabel("«단계|step»"); a.set_ylabel("log10 «손실|loss»"); a.set_title("«학습 곡선|training loss»"); a.legend()
b.axvspan(TRAIN_LENGTHS.start, TRAIN_LENGTHS.stop - 1, color="0.9", label="«학습 길이|training lengths»")
b.set_xlabel("«기호 수 n|symbols n»"); b.set_ylabel("«정확 일치|exact match»"); b.set_title("«더 긴 과제|longer tasks»")
b.legend()
c.set_xlabel("«답의 자리 (n = 12)|answer position (n = 12)»"); c.set_ylabel("«맞힌 비율|fraction right»")
c.set_title("«n = 12: 어디서 틀리나|n = 12: where it goes wrong»"); c.legend()
e.set_xscale("symlog", linthresh=4); e.set_xticks(OFFSETS, [str(o) for o in OFFSETS]); e.set_xlabel("offset"); e.set_ylabel("«정확 일치 (n = 2…8)|exact match (n = 2…8)»")
e.set_title("«같은 길이, 민 자리|same lengths, shifted positions»"); e.legend()
book.show(fig)"""),
    md(ko="""위의 숫자는 이 실행이 낸 그대로다. 사인파는 절대 위치라 학습 때 본 적 없는 자리(시퀀스 위치 17 너머)의 벡터를 처음 만나고,
RoPE 는 상대 위치라 자리 자체는 새롭지 않지만, 답의 기호 j 에서 원문의 기호 j 까지의 간격 n 이 학습 때의 최대(8)를 넘는다 —
모델이 'n 칸 앞을 보라' 를 배웠다면 그 간격은 처음 보는 것이다. 자리를 통째로 밀 때는 사정이 다르다: RoPE 의 점수는 간격에만 달려 있어 밀어도 (반올림까지) 그대로이고, 사인파는 입력 자체가 바뀐다.
어느 쪽이든 학습 길이 밖에서 무엇이 달라지는지는 위치 방식이 정한다. 같은 비교를 여러 씨앗과 방식으로 길게 재는 것이 `posenc lengthgen` 이고, 노트북 3 의
`exercises-relative` 는 같은 질문을 이동(shift)으로 묻는다.""",
       en="""The numbers above are this run's. The sinusoid is absolute: past the training lengths it meets vectors for
sequence positions it never saw (beyond 17). RoPE is relative: no position is new to it, but the offset n from answer symbol j back
to source symbol j exceeds the largest seen in training (8) — if the model learned 'look n back', that offset is new.
A shift is another matter: RoPE's scores depend on the offsets alone, so shifting leaves them as they were (to rounding),
while the sinusoid changes the inputs themselves. Either way, what changes past the training length is the position
scheme's doing. `posenc lengthgen` measures the same comparison over seeds and schemes at length, and
notebook 3's `exercises-relative` asks the same question with a shift."""),
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
