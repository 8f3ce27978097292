"""The training loop: schedule, learning, exact resume, Ctrl-C, NaN stop."""

from __future__ import annotations

import math
import os
import signal

import pytest
import torch
import torch.nn.functional as F

from posenc import ModelConfig, build_decoder_only
from posenc.checkpoint import read_state
from posenc.train import NonFiniteLossError, TrainConfig, lr_at, step_generator, train

VOCAB = 11


def counting_batches(seed: int, batch: int = 8, length: int = 12):
    """Sequences a, a+1, a+2, … (mod V) from a random start: learnable in a few dozen updates."""

    def batches(step: int, rank: int, world: int):
        gen = step_generator(seed, step)
        start = torch.randint(0, VOCAB, (batch, 1), generator=gen)
        ids = (start + torch.arange(length)) % VOCAB
        return ids[rank::world]

    return batches


def lm_loss(model, ids):
    logits = model(ids[:, :-1])  # (B, T-1, V)
    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="sum")
    return loss, ids[:, 1:].numel()


def tiny_model(seed: int, dropout: float = 0.0):
    torch.manual_seed(seed)
    return build_decoder_only(ModelConfig(vocab_size=VOCAB, dim=32, num_heads=2, num_layers=1,
                                          position="rope", dropout=dropout))


def test_schedule_matches_the_formula():
    cfg = TrainConfig(steps=50, lr=2e-3, min_lr=2e-4, warmup_steps=10, progress=False)
    lrs = [lr_at(s, cfg) for s in range(cfg.steps)]
    # independent statement of the schedule: warm-up reaches the peak at update 10, cosine ends at min_lr
    assert lrs[:10] == pytest.approx([2e-3 * (s + 1) / 10 for s in range(10)])
    for s in range(10, 50):
        t = (s - 10) / 39
        assert lrs[s] == pytest.approx(2e-4 + 0.5 * (2e-3 - 2e-4) * (1 + math.cos(math.pi * t)))
    assert lrs[9] == lrs[10] == pytest.approx(2e-3) and lrs[-1] == pytest.approx(2e-4)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


@pytest.mark.parametrize("bad", [dict(steps=0), dict(steps=5, warmup_steps=6), dict(steps=5, lr=-1.0),
                                 dict(steps=5, min_lr=1.0), dict(steps=5, grad_clip=0.0)])
def test_bad_config_is_rejected(bad):
    with pytest.raises(ValueError):
        TrainConfig(**bad)


def test_loss_decreases_on_a_tiny_task(seed):
    model = tiny_model(seed)
    cfg = TrainConfig(steps=60, lr=1e-2, warmup_steps=5, log_every=1, progress=False, seed=seed)
    evals = []
    result = train(model, lm_loss, counting_batches(seed), cfg,
                   evaluate=lambda m, step: evals.append((step, m.training)) or {"seen": float(step)})
    first = result.history[0]["loss"]
    assert first > 1.5  # ~ln(11) = 2.4 at the start
    assert result.final_loss < 0.3 * first
    assert result.step == 60 and not result.interrupted and result.tokens == 60 * 8 * 11
    assert evals == [(60, False)] and result.evals == [{"step": 60, "seen": 60.0}]
    assert model.training  # restored after evaluation


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_resume_after_ctrl_c_reaches_bitwise_the_same_weights(tmp_path, seed):
    # dropout > 0 so that the RNG state has to be restored too
    cfg = TrainConfig(steps=14, lr=5e-3, warmup_steps=3, checkpoint_every=4, log_every=1, progress=False, seed=seed)
    reference = tiny_model(seed, dropout=0.1)
    ref = train(reference, lm_loss, counting_batches(seed), cfg, checkpoint_dir=tmp_path / "ref")

    base = counting_batches(seed)

    def interrupting(step, rank, world):
        if step == 9:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does; the loop stops at the next check
        return base(step, rank, world)

    run = tmp_path / "run"
    first = train(tiny_model(seed, dropout=0.1), lm_loss, interrupting, cfg, checkpoint_dir=run)
    assert first.interrupted and first.step in (9, 10)
    assert read_state(run)["step"] == first.step
    # a fresh process would build the model from scratch with another init: resume must overwrite all of it
    resumed_model = tiny_model(seed + 1, dropout=0.1)
    second = train(resumed_model, lm_loss, base, cfg, checkpoint_dir=run, resume=True)
    assert second.step == 14 and not second.interrupted
    for key, value in _weights(reference).items():
        assert torch.equal(resumed_model.state_dict()[key], value), key
    assert [h["loss"] for h in second.history] == [h["loss"] for h in ref.history]


def test_resume_refuses_a_changed_trajectory(tmp_path, seed):
    cfg = TrainConfig(steps=3, progress=False)
    train(tiny_model(seed), lm_loss, counting_batches(seed), cfg, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="lr: checkpoint 0.001 vs now 0.01"):
        train(tiny_model(seed), lm_loss, counting_batches(seed), TrainConfig(steps=3, lr=1e-2, progress=False),
              checkpoint_dir=tmp_path, resume=True)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(tiny_model(seed), lm_loss, counting_batches(seed), cfg, checkpoint_dir=tmp_path / "nothing", resume=True)


def test_nan_loss_stops_naming_the_step(tmp_path, seed):
    calls = []

    def loss_fn(model, ids):
        loss, count = lm_loss(model, ids)
        calls.append(1)
        return (loss * float("nan") if len(calls) == 4 else loss), count

    with pytest.raises(NonFiniteLossError, match=r"loss is nan at step 3 \(update 4 of 10"):
        train(tiny_model(seed), loss_fn, counting_batches(seed), TrainConfig(steps=10, progress=False),
              checkpoint_dir=tmp_path)
    assert not (tmp_path / "latest").exists()  # nothing is written for a broken run


def test_inf_gradient_stops_too(seed):
    model = tiny_model(seed)
    model.head.weight.register_hook(lambda grad: grad * float("inf"))  # finite loss, infinite gradient
    with pytest.raises(NonFiniteLossError, match="gradient norm is (inf|nan) at step 0"):
        train(model, lm_loss, counting_batches(seed), TrainConfig(steps=2, progress=False))


def test_a_resumed_run_counts_the_time_of_the_calls_before_it(tmp_path, seed):
    """total_seconds / total_cpu_seconds add the interrupted call's time (saved in the checkpoint) to this one's."""
    import time

    cfg = TrainConfig(steps=12, lr=5e-3, warmup_steps=2, log_every=1, progress=False, seed=seed)
    base = counting_batches(seed)

    def slow_then_stop(step, rank, world):
        if step < 5:
            busy = time.process_time() + 0.05  # burn CPU so the first call's share is clearly non-zero
            while time.process_time() < busy:
                pass
        if step == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return base(step, rank, world)

    run = tmp_path / "run"
    first = train(tiny_model(seed), lm_loss, slow_then_stop, cfg, checkpoint_dir=run)
    assert first.interrupted and first.cpu_seconds >= 0.25
    assert first.total_cpu_seconds == pytest.approx(first.cpu_seconds, abs=1e-3)  # nothing resumed
    saved = read_state(run)["state"]["spent"]
    assert saved["cpu_seconds"] == pytest.approx(first.total_cpu_seconds, abs=0.05)
    second = train(tiny_model(seed), lm_loss, base, cfg, checkpoint_dir=run, resume=True)
    assert second.step == 12
    assert second.total_cpu_seconds == pytest.approx(saved["cpu_seconds"] + second.cpu_seconds, abs=1e-6)
    assert second.total_seconds == pytest.approx(saved["seconds"] + second.seconds, abs=1e-6)
    assert second.total_cpu_seconds > second.cpu_seconds + 0.2
