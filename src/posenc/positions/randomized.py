"""Randomized positional encodings (Ruoss et al., 2023, ACL).

"Randomized Positional Encodings Boost Length Generalization of
Transformers": while training, a sequence of T tokens does not get positions
0 … T − 1 but a sorted random subset of T positions from the larger range
[0, max_len). The model so sees every position up to max_len during training
while the *order* stays intact, and at evaluation longer sequences use
positions it has already seen.

* Training (``module.training`` is True): the given positions only supply the
  shape; each sequence of the batch draws its own sorted subset from the
  scheme's own ``torch.Generator`` (``seed`` option), so runs are
  reproducible and independent of the global RNG.
* Evaluation, ``eval_positions="given"`` (the default): the given positions
  are used unchanged — what cached decoding needs, since each new token
  continues the positions of the ones before it.
* Evaluation, ``eval_positions="sampled"``: a sorted random subset again, as
  the paper evaluates (its reference code draws the subset in every forward
  pass, training or not): a model trained only on gapped positions never saw
  the contiguous 0 … T − 1 and answers worse on them, in range too. The draw
  comes from a generator seeded afresh from ``seed`` on every call, so
  evaluation is a deterministic function of the weights and the input and
  does not move the training draws. Whole sequences only (positions must start
  at 0): a cached continuation is refused.
* Under ``torch.compile`` (training, and evaluation with ``"sampled"``) the
  draws come from the global RNG instead of the scheme's generator (see
  ``sample_positions``): the same distribution, but a compiled sampled
  evaluation is reproducible only through ``torch.manual_seed``, not ``seed``.

Shape legend: B batch, T sequence length, D width.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from posenc.checks import check_values, compiling
from posenc.validation import check_memory, check_table, number, positive_int
from posenc.validation import seed as seed_
from posenc.positions.absolute import check_even, sinusoid_table
from posenc.positions.base import AdditiveScheme, ModelContext, check_positions


#: Evaluation draws (eval_positions="sampled") come from seed + this: a stream apart from training's.
_EVAL_SEED_OFFSET = 1_000_003


class RandomizedPositions(AdditiveScheme):
    """Randomized positions (Ruoss et al., 2023) over a sinusoidal or learned table.

    Reference used to verify: the paper's sampling rule (sorted, without
    replacement, within [0, max_len)) checked on many draws, and the inner
    table against ``sinusoid_table`` / the learned rows.

    Args:
        dim: model width (even for the sinusoidal table).
        max_len: positions are drawn from [0, max_len); must be ≥ every training length.
        inner: the encoding evaluated at the drawn positions, "sinusoidal" or "learned"
            (a learned table has max_len rows).
        base: the sinusoidal base.
        seed: seed of the scheme's own generator.
        eval_positions: in evaluation mode, use the ``"given"`` positions or draw
            ``"sampled"`` ones as in training (the paper's protocol; whole sequences only).
    """

    name: ClassVar[str] = "randomized"

    def __init__(self, *, dim: int, max_len: int = 2048, inner: Literal["sinusoidal", "learned"] = "sinusoidal",
                 base: float = 10000.0, seed: int = 0,
                 eval_positions: Literal["given", "sampled"] = "given") -> None:
        super().__init__(dim=dim)
        max_len = positive_int(max_len, "max_len")
        if inner == "learned":
            check_table(max_len, dim, "position table", option="max_len")
        # every training draw is a permutation of [0, max_len) (int64; under torch.compile float32 keys and
        # their int64 argsort): 12 bytes per position, made when the model first trains — refuse it now
        check_memory(12.0 * max_len, f"a draw of randomized positions from max_len={max_len}",
                     fix="lower max_len (a few times the longest training sequence is usual)")
        base = number(base, "base", above=1, fix="the wavelength base is usually 10000")
        if inner not in ("sinusoidal", "learned"):
            raise ValueError(f"inner must be 'sinusoidal' or 'learned', got {inner!r}")
        if inner == "sinusoidal":
            check_even(dim, name="dim", what="the sinusoidal encoding")
        if eval_positions not in ("given", "sampled"):
            raise ValueError(f"eval_positions must be 'given' or 'sampled', got {eval_positions!r}")
        self.eval_positions = eval_positions
        self.max_len, self.inner, self.base, self.seed = max_len, inner, base, seed_(seed, "seed")
        self.generator = torch.Generator().manual_seed(self.seed)
        self.weight = nn.Parameter(torch.randn(max_len, dim) * 0.02) if inner == "learned" else None

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        """The model's width and, when it knows one, its longest sequence as ``max_len``."""
        args = super().context_args(ctx)
        return args if ctx.max_length is None else {**args, "max_len": ctx.max_length}

    def reseed(self, seed: int) -> None:
        """Restart the position draws from ``seed``."""
        self.seed = int(seed)
        self.generator.manual_seed(self.seed)

    def sample_positions(self, batch: int, length: int, *, device: torch.device | None = None,
                         generator: torch.Generator | None = None) -> Tensor:
        """A sorted random subset of ``length`` positions from [0, max_len) per sequence, int64 (B, T).

        ``generator``: where the draws come from (default: the scheme's own, which training advances).
        Under ``torch.compile`` the scheme's own generator cannot enter the
        graph; the draw is then the first ``length`` entries of a random
        permutation made by sorting uniform keys from the global RNG (seeded
        by ``torch.manual_seed``): the same distribution, another stream.
        """
        if length > self.max_len:
            raise ValueError(
                f"randomized: a training sequence of {length} tokens needs max_len >= {length}, got {self.max_len}")
        if compiling():
            keys = torch.rand(batch, self.max_len, device=device)  # (B, max_len)
            return keys.argsort(dim=-1)[:, :length].sort(dim=-1).values
        gen = self.generator if generator is None else generator
        draws = [torch.randperm(self.max_len, generator=gen)[:length].sort().values for _ in range(batch)]
        return torch.stack(draws) if draws else torch.zeros(0, length, dtype=torch.long)

    def encode(self, positions: Tensor) -> Tensor:
        positions = check_positions(positions)
        if self.weight is None:
            return sinusoid_table(positions, self.dim, self.base)
        check_values(positions < self.max_len,
                     lambda: f"randomized (learned): the table has {self.max_len} rows but position "
                             f"{int(positions.max())} was asked for; raise max_len",
                     compiled_message=f"randomized (learned): the table has {self.max_len} rows but a larger "
                                      "position was asked for; raise max_len")
        return self.weight[positions.to(self.weight.device)]

    def add(self, x: Tensor, positions: Tensor) -> Tensor:
        if self.training:
            positions = check_positions(positions)  # only its length counts while training
            if positions.shape[-1] != x.shape[-2]:
                raise ValueError(f"randomized: {positions.shape[-1]} positions for a sequence of length {x.shape[-2]}")
            positions = self.sample_positions(x.shape[0], x.shape[-2], device=x.device).to(x.device)
        elif self.eval_positions == "sampled":
            positions = check_positions(positions)
            if positions.shape[-1] != x.shape[-2]:
                raise ValueError(f"randomized: {positions.shape[-1]} positions for a sequence of length {x.shape[-2]}")
            check_values(positions[..., :1] == 0,
                         lambda: "randomized (eval_positions='sampled') draws positions for whole sequences, but "
                                 f"these start at {int(positions[..., 0].max())}: a cached continuation cannot be "
                                 "re-drawn; use eval_positions='given' to decode with a cache",
                         compiled_message="randomized (eval_positions='sampled') draws positions for whole "
                                          "sequences; a cached continuation cannot be re-drawn")
            # the same draws on every call; a generator cannot enter a compiled graph, where the draw comes
            # from the global RNG instead (sample_positions), as in compiled training
            fresh = None if compiling() else torch.Generator().manual_seed(self.seed + _EVAL_SEED_OFFSET)
            positions = self.sample_positions(x.shape[0], x.shape[-2], device=x.device, generator=fresh).to(x.device)
        return super().add(x, positions)

    def max_position(self) -> int | None:
        return self.max_len - 1 if self.weight is not None else None

    def options(self) -> dict[str, Any]:
        return {"dim": self.dim, "max_len": self.max_len, "inner": self.inner, "base": self.base, "seed": self.seed,
                "eval_positions": self.eval_positions}
