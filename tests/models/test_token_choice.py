"""posenc.models.decoder's greedy choice and finiteness check: equal to torch's argmax and isfinite, faster."""

from __future__ import annotations

import pytest
import torch

from posenc.models.decoder import GREEDY_BLOCK, all_finite, greedy, next_token


def test_greedy_is_argmax_with_ties_in_every_place(gen: torch.Generator) -> None:
    """Random sizes around the block size, few distinct values (many ties: argmax's first index must win,
    whether the tie lies in one block, across blocks, or between the blocks and the tail)."""
    for _ in range(300):
        rows = int(torch.randint(1, 5, (1,), generator=gen))
        vocab = int(torch.randint(1, 5 * GREEDY_BLOCK, (1,), generator=gen))
        values = int(torch.randint(1, 9, (1,), generator=gen))
        logits = torch.randint(0, values, (rows, vocab), generator=gen).float()
        assert torch.equal(greedy(logits), logits.argmax(-1)), (rows, vocab, values)
    big = torch.randn(3, 262_144, generator=gen)  # Gemma 3's vocabulary
    big[1, 262_143] = 99.0  # the largest at the very end (262,144 is a whole number of blocks: in the last one)
    big[2, 5] = big[2, 262_000] = 99.0  # a tie across blocks: the first
    assert torch.equal(greedy(big), big.argmax(-1)) and greedy(big)[2] == 5
    tail = torch.randn(2, 3 * GREEDY_BLOCK + 17, generator=gen)
    tail[0, -1] = 50.0  # the largest in the last V mod block values
    tail[1, 0] = tail[1, -1] = 50.0  # a tie between the blocks and the tail: the block's
    assert greedy(tail).tolist() == [3 * GREEDY_BLOCK + 16, 0]
    assert torch.equal(next_token(big), big.argmax(-1))  # temperature 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_all_finite_finds_one_bad_value_anywhere(bad: float, gen: torch.Generator) -> None:
    logits = torch.randn(2, 50_000, generator=gen) * 30
    assert all_finite(logits)
    for _ in range(20):
        row, col = int(torch.randint(0, 2, (1,), generator=gen)), int(torch.randint(0, 50_000, (1,), generator=gen))
        spoilt = logits.clone()
        spoilt[row, col] = bad
        assert not all_finite(spoilt) and not bool(torch.isfinite(spoilt).all())
    assert all_finite(torch.full((1, 7), torch.finfo(torch.float32).max))  # large but finite
