import math

import torch

from posenc.positions import ALiBi, alibi_slopes


def paper_slopes(n: int) -> list[float]:
    """Press et al.'s reference get_slopes, restated."""
    def pow2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


def test_slopes_match_paper_for_any_head_count():
    for n in range(1, 70):
        torch.testing.assert_close(alibi_slopes(n), torch.tensor(paper_slopes(n), dtype=torch.float64))


def test_bias_is_minus_slope_times_distance(gen):
    heads = int(torch.randint(1, 17, (1,), generator=gen))
    alibi = ALiBi(num_heads=heads)
    q_pos = torch.randint(0, 1000, (4,), generator=gen)
    k_pos = torch.randint(0, 1000, (6,), generator=gen)
    bias = alibi.attention_bias(q_pos, k_pos)
    ref = -alibi_slopes(heads)[:, None, None] * (q_pos[:, None] - k_pos[None, :]).abs().double()
    torch.testing.assert_close(bias.double(), ref, rtol=1e-6, atol=1e-4)
    assert bias.shape == (heads, 4, 6)
