"""Randomized positions (Ruoss et al., 2023): seeded sorted draws while training; given or sampled ones at evaluation."""

import pytest
import torch

from posenc import ModelConfig, build_decoder_only
from posenc.positions import RandomizedPositions, sinusoid_table


def test_training_draws_sorted_distinct_positions_in_range(gen):
    max_len = int(torch.randint(20, 200, (1,), generator=gen))
    length = int(torch.randint(1, 20, (1,), generator=gen))
    scheme = RandomizedPositions(dim=8, max_len=max_len, seed=int(torch.randint(0, 10**6, (1,), generator=gen)))
    draws = torch.cat([scheme.sample_positions(4, length) for _ in range(50)])  # (200, T)
    assert draws.dtype == torch.long and draws.shape == (200, length)
    assert int(draws.min()) >= 0 and int(draws.max()) < max_len
    assert bool((draws[:, 1:] > draws[:, :-1]).all())  # sorted and distinct: order survives, no repeats
    if length < max_len:
        assert len({tuple(r) for r in draws.tolist()}) > 1  # actually random
        # every position gets drawn eventually (the model sees the whole range)
        assert len(set(draws.flatten().tolist())) > 0.5 * max_len


def test_same_seed_same_draws_and_training_uses_them():
    a, b = RandomizedPositions(dim=8, max_len=64, seed=7), RandomizedPositions(dim=8, max_len=64, seed=7)
    x = torch.zeros(3, 5, 8)
    out = a.train().add(x, torch.arange(5))
    drawn = b.sample_positions(3, 5)
    torch.testing.assert_close(out, sinusoid_table(drawn, 8).float())
    a.reseed(7)
    torch.testing.assert_close(a.add(x, torch.arange(5)), out)


def test_evaluation_uses_the_given_positions(gen):
    scheme = RandomizedPositions(dim=8, max_len=64).eval()
    pos = torch.randint(0, 10**6, (5,), generator=gen)
    torch.testing.assert_close(scheme.add(torch.zeros(1, 5, 8), pos)[0], sinusoid_table(pos, 8).float())


def test_errors_name_the_limit():
    with pytest.raises(ValueError, match="needs max_len >= 9"):
        RandomizedPositions(dim=8, max_len=8).train().add(torch.zeros(1, 9, 8), torch.arange(9))
    learned = RandomizedPositions(dim=8, max_len=8, inner="learned").eval()
    with pytest.raises(ValueError, match="8 rows but position 8"):
        learned.add(torch.zeros(1, 9, 8), torch.arange(9))
    with pytest.raises(TypeError, match="integer dtype"):
        RandomizedPositions(dim=8).train().add(torch.zeros(1, 3, 8), torch.arange(3.0))


def test_model_trains_on_random_positions_and_evaluates_on_given_ones(gen):
    lm = build_decoder_only(ModelConfig(vocab_size=11, dim=16, num_heads=2, num_layers=1, position="randomized",
                                        position_options={"max_len": 100})).double()
    ids = torch.randint(0, 11, (2, 6), generator=gen)
    lm.train()
    first, second = lm(ids), lm(ids)
    assert not torch.allclose(first, second)  # fresh positions per step
    lm.eval()
    torch.testing.assert_close(lm(ids), lm(ids))


def test_sampled_evaluation_draws_like_training_the_same_draws_every_call(gen):
    """eval_positions='sampled' (the paper's protocol): sorted draws from [0, max_len), a pure function of the input."""
    max_len, length = int(torch.randint(20, 80, (1,), generator=gen)), int(torch.randint(2, 20, (1,), generator=gen))
    seed = int(torch.randint(0, 10**6, (1,), generator=gen))
    scheme = RandomizedPositions(dim=8, max_len=max_len, seed=seed, eval_positions="sampled").eval()
    x = torch.zeros(6, length, 8, dtype=torch.float64)
    before = scheme.generator.get_state()
    out = scheme.add(x, torch.arange(length))
    torch.testing.assert_close(scheme.add(x, torch.arange(length)), out)  # deterministic
    assert torch.equal(scheme.generator.get_state(), before)  # training's stream untouched
    # recover the drawn positions by matching each row against the whole table (sinusoid rows are distinct)
    table = sinusoid_table(torch.arange(max_len), 8)
    drawn = torch.cdist(out.reshape(-1, 8), table).argmin(-1).reshape(6, length)
    torch.testing.assert_close(out, table[drawn])
    assert bool((drawn[:, 1:] > drawn[:, :-1]).all()) and int(drawn.max()) < max_len
    assert not torch.equal(drawn, torch.arange(length).expand(6, -1))  # not the given 0..T-1
    given = RandomizedPositions(dim=8, max_len=max_len, seed=seed).eval()
    torch.testing.assert_close(given.add(x, torch.arange(length))[0], table[:length])


def test_sampled_evaluation_refuses_a_cached_continuation():
    scheme = RandomizedPositions(dim=8, max_len=64, eval_positions="sampled").eval()
    with pytest.raises(ValueError, match="start at 5.*eval_positions='given'"):
        scheme.add(torch.zeros(1, 1, 8), torch.tensor([5]))
    with pytest.raises(ValueError, match="eval_positions must be 'given' or 'sampled'"):
        RandomizedPositions(dim=8, eval_positions="random")
