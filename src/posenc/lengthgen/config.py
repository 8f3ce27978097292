"""What one length-generalisation cell is: the task lengths, the model and the training, as plain data.

A :class:`CellConfig` *composes* the library's own configs instead of copying
their fields: ``model`` is a :class:`~posenc.transformer.ModelConfig` (its
``vocab_size`` and ``position`` are filled in per cell from the task and the
scheme) and ``train`` a :class:`~posenc.train.TrainConfig` (its ``seed`` is the
cell's seed). What is left here belongs to the benchmark alone: the task's
options (e.g. the digit order of addition's answer), the framing, the training
and test lengths, the batch size, the evaluation set and the convergence gate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from posenc.tasks import Task, build_task
from posenc.tasks.framing import check_framing
from posenc.train import TrainConfig
from posenc.models import ModelConfig

#: The schemes of Kazemnejad et al. (2023), in their order (learned added: the table they left out).
PAPER_SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
#: The 2026 catalogue's trainable schemes with length-generalisation claims (CoPE, Golovneva et al. 2024; FoPE,
#: Hua et al. 2024; PoPE, Gopalakrishnan et al. 2025), each read against its own paper in the report.
NEW_SCHEMES = ("cope", "fope", "pope")
#: The benchmark's default schemes: the paper's, plus the ones later papers claim generalise better
#: (FIRE, Li et al. 2024; KERPLE-log, Chi et al. 2022), randomized positions (Ruoss et al. 2023) and NEW_SCHEMES.
SCHEMES = (*PAPER_SCHEMES, "fire", "kerple-log", "randomized", *NEW_SCHEMES)
#: The five tasks of the benchmark.
TASKS = ("copy", "reverse", "sort", "addition", "scan")

#: Per task: (train_max, test_max) in the task's own length unit. Copy/reverse/sort: train on 1–16
#: symbols, test to 32 (the paper: 1–20, test to 40), so that "beyond" is sixteen lengths, not a
#: cliff one step past a short training range; addition: 1–4 digits per operand, test to 8; SCAN:
#: its length split (train on ≤ 22 output actions, test up to 48).
TASK_LENGTHS = {"copy": (16, 32), "reverse": (16, 32), "sort": (16, 32), "addition": (4, 8), "scan": (22, 48)}


def _model() -> ModelConfig:
    # vocab_size and position are set per cell (cell.build_model); 1 / "none" here are placeholders.
    # Four layers, not two: NoPE must infer positions from the causal mask before it can use them, and
    # with two layers it did not learn reverse in range (benchmarks/lengthgen/README.md, the sweep).
    return ModelConfig(vocab_size=1, dim=32, num_heads=4, num_layers=4, position="none")


def _train() -> TrainConfig:
    return TrainConfig(steps=12000, lr=5e-3, min_lr=5e-4, warmup_steps=100, weight_decay=0.01, grad_clip=1.0,
                       eval_every=100, log_every=50, progress=False)


@dataclass(frozen=True, kw_only=True)
class CellConfig:
    """How every (task, scheme, seed) cell of a grid is built, trained, gated and tested.

    Args:
        model: the model (``vocab_size`` and ``position`` are set per cell).
        train: the optimiser, schedule and step budget; ``eval_every`` is how often the
            convergence gate looks; ``seed`` is replaced by the cell's seed.
        task_options: keyword options of the task (:func:`posenc.tasks.build_task`), e.g.
            ``{"answer_order": "lsd"}`` for addition; ``{}``: the task's defaults.
        framing: ``decoder`` (prompt + answer, as in the paper) or ``encoder-decoder``.
        train_min, train_max, test_max: lengths (None: the task's default, :data:`TASK_LENGTHS`;
            a ``train_max`` without ``test_max`` tests to twice it).
        batch_size: examples per update (lengths drawn uniformly from the training range).
        threshold: the convergence gate: training stops once held-out in-range exact match
            reaches this; a cell that never does is "not learned" and left out of every
            beyond-range comparison.
        gate_examples: held-out examples per training length that the gate evaluates.
        eval_examples: test examples per length (every length up to ``test_max``).
    """

    model: ModelConfig = field(default_factory=_model)
    train: TrainConfig = field(default_factory=_train)
    task_options: dict[str, Any] = field(default_factory=dict)
    framing: str = "decoder"
    train_min: int = 1
    train_max: int | None = None
    test_max: int | None = None
    batch_size: int = 32
    threshold: float = 0.99
    gate_examples: int = 20
    eval_examples: int = 50

    def __post_init__(self) -> None:
        check_framing(self.framing)
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        for name in ("batch_size", "gate_examples", "eval_examples", "train_min"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def task(self, name: str) -> Task:
        """The task ``name`` built with this config's options."""
        return build_task(name, **self.task_options)

    def lengths_for(self, task: Task) -> tuple[int, int, int]:
        """(train_min, train_max, test_max) for ``task``, defaults filled in and checked."""
        base_train, base_test = TASK_LENGTHS.get(task.name, (8, 16))
        train_max = self.train_max or base_train
        test_max = self.test_max or (base_test if self.train_max is None else 2 * train_max)
        hi = task.max_length()
        test_max = min(test_max, hi) if hi is not None else test_max
        if not 1 <= self.train_min <= train_max <= test_max:
            raise ValueError(f"need 1 <= train_min <= train_max <= test_max, got "
                             f"{self.train_min}, {train_max}, {test_max} for task {task.name!r}")
        return self.train_min, train_max, test_max

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["model"], data["train"] = self.model.to_dict(), self.train.to_dict()
        data["task_options"] = dict(self.task_options)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CellConfig":
        data = dict(data)
        model = ModelConfig.from_dict(data.pop("model"))
        train = TrainConfig(**data.pop("train"))
        return cls(model=model, train=train, **data)

    def identity(self) -> dict[str, Any]:
        """What decides a cell's result (compared on resume): all but the progress bar and checkpoint cadence."""
        data = self.to_dict()
        for key in ("progress", "checkpoint_every", "keep_checkpoints"):
            data["train"].pop(key)
        return data

    def with_changes(self, *, model: dict[str, Any] | None = None, train: dict[str, Any] | None = None,
                     **own: Any) -> "CellConfig":
        """A copy with the given non-None fields replaced (``model=`` / ``train=`` for the nested configs)."""
        picked = {k: v for k, v in own.items() if v is not None}
        if model:
            picked["model"] = replace(self.model, **{k: v for k, v in model.items() if v is not None})
        if train:
            changes = {k: v for k, v in train.items() if v is not None}
            if "steps" in changes and "warmup_steps" not in changes:
                changes["warmup_steps"] = min(self.train.warmup_steps, changes["steps"])
            picked["train"] = replace(self.train, **changes)
        return replace(self, **picked)


#: The base of every preset: 4 layers of width 32, a budget of 12,000 updates.
DEFAULT = CellConfig()

#: The recorded benchmark: one CellConfig per task, every scheme and seed of a task sharing it. The
#: model and the budget are sized per task by measurement (the sweep in benchmarks/lengthgen/README.md):
#: large enough that every scheme can learn the task on its training lengths, no larger (the grid is
#: recorded on 2 CPU cores). A task not named here uses :data:`DEFAULT`.
PRESETS: dict[str, CellConfig] = {
    "copy": DEFAULT,
    "reverse": DEFAULT,
    "sort": DEFAULT,
    # Addition: width 128 at lr 1e-3 (at width 64 learned, sinusoidal and randomized positions did not
    # learn it on most seeds, whatever the digit order, depth or budget; at width 128 lr 5e-3 is too
    # high), and 100 gate sums per length, so the gate sees 400 sums (at 20 per length it saw 80, and
    # 80/80 let through models at 96 % in range). benchmarks/lengthgen/README.md gives the probes.
    "addition": DEFAULT.with_changes(model={"dim": 128}, gate_examples=100, train={"lr": 1e-3, "min_lr": 1e-4}),
    "scan": DEFAULT,
}


def preset(task: str) -> CellConfig:
    """The recorded benchmark's CellConfig for ``task`` (:data:`DEFAULT` for a task without a preset)."""
    return PRESETS.get(task, DEFAULT)

#: A pipeline check that runs in a few minutes on 2 cores (short lengths, small budget).
QUICK = DEFAULT.with_changes(train_max=5, test_max=10, eval_examples=30, gate_examples=10,
                             train={"steps": 600, "warmup_steps": 50, "eval_every": 50})
