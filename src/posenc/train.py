"""A short, model-agnostic training loop: AdamW, warm-up + cosine, clipping, eval, checkpoints, DDP or FSDP.

The caller supplies three functions and the loop does the rest:

* ``batches(step, rank, world_size) -> batch`` — the batch of this rank at update
  ``step``. It must depend only on its arguments (seed a ``torch.Generator``
  from them, e.g. with :func:`step_generator`): then a resumed run sees exactly
  the batches an uninterrupted one would, with no data-loader state to save,
  and ``world_size`` ranks that each take their share of a global batch train
  the same model as one process taking all of it.
* ``loss_fn(model, batch) -> (loss_sum, count)`` — the *summed* loss over the
  batch's ``count`` supervised tokens (or examples). The loop divides by the
  count over all ranks, so the gradient is that of the global mean whatever
  the split. Call ``model(...)`` (its forward) inside: under DDP that call is
  what synchronises gradients.
* ``evaluate(model, step) -> dict[str, float]`` (optional) — run every
  ``eval_every`` updates and at the end, on rank 0, in eval mode, without grad.

Tiny CPU example::

    import torch
    from posenc import ModelConfig, build_decoder_only
    from posenc.train import TrainConfig, step_generator, train

    model = build_decoder_only(ModelConfig(vocab_size=12, dim=32, num_heads=2, position="rope"))
    def batches(step, rank, world):
        ids = torch.randint(0, 12, (8, 10), generator=step_generator(0, step, rank))
        return ids
    def loss_fn(model, ids):
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="sum")
        return loss, ids[:, 1:].numel()
    result = train(model, loss_fn, batches, TrainConfig(steps=20, lr=3e-3, warmup_steps=5))

Under ``torchrun --nproc_per_node=N`` the same code runs data-parallel
(DistributedDataParallel; gloo on CPU, NCCL on GPU): call :func:`init_distributed`
first (the ``posenc`` commands do). ``train(..., fsdp=True)`` shards the
parameters, gradients and optimiser state over the ranks instead (FSDP2,
``posenc.fsdp``), with the same result and the same checkpoint files.

Schedule: linear warm-up over ``warmup_steps`` updates to ``lr``, then a cosine
decay to ``min_lr`` at the last update (Loshchilov & Hutter, SGDR, 2017; the
form used by nanoGPT). AdamW: Loshchilov & Hutter (2019), ``torch.optim.AdamW``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from tqdm.auto import tqdm

from posenc.checkpoint import (
    capture_rng,
    check_run_dir,
    clean_temporaries,
    load_checkpoint,
    read_optimizer_state,
    read_state,
    refuse_existing_run,
    restore_rng,
    run_lock,
    save_checkpoint,
)
from posenc.validation import number, positive_int, seed

BatchFn = Callable[[int, int, int], Any]
LossFn = Callable[[nn.Module, Any], tuple[Tensor, int | Tensor]]
EvalFn = Callable[[nn.Module, int], dict[str, float]]
StopFn = Callable[[dict[str, Any]], bool]

#: TrainConfig fields that shape the trajectory: a resume must not change them.
_TRAJECTORY_FIELDS = ("lr", "min_lr", "warmup_steps", "steps", "weight_decay", "betas", "eps", "grad_clip", "seed")


class NonFiniteLossError(FloatingPointError):
    """The loss or the gradient norm became NaN/inf; the message names the step."""


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How to train (plain data, stored in every checkpoint).

    Args:
        steps: total optimiser updates.
        lr: peak learning rate.
        min_lr: learning rate at the last update (end of the cosine).
        warmup_steps: updates of linear warm-up from lr/warmup_steps to lr.
        weight_decay: AdamW decoupled weight decay.
        betas, eps: AdamW moments.
        grad_clip: clip the global gradient norm to this (None: no clipping; the norm is still logged).
        eval_every: call ``evaluate`` every this many updates (0: only at the end).
        checkpoint_every: save every this many updates (0: only at the end and on Ctrl-C).
        keep_checkpoints: step directories kept on disk.
        log_every: record loss/lr/grad-norm in the history every this many updates.
        seed: seeds torch's global RNG (dropout) as ``seed + rank`` at the start.
        progress: show a tqdm bar (rank 0 only).
    """

    steps: int
    lr: float = 1e-3
    min_lr: float = 0.0
    warmup_steps: int = 0
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    grad_clip: float | None = 1.0
    eval_every: int = 0
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    log_every: int = 10
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        positive_int(self.steps, "steps")
        # at most 1e6 (an AdamW step moves a weight by about lr; past that nothing trains): 1e300 overflowed torch's update, a RuntimeError mid-run
        number(self.lr, "lr", above=0, maximum=1e6, fix="a typical peak learning rate is 1e-4 to 1e-2")
        number(self.min_lr, "min_lr", minimum=0)
        number(self.weight_decay, "weight_decay", minimum=0)
        number(self.eps, "eps", above=0)
        if len(self.betas) != 2:
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        for beta in self.betas:
            number(beta, "betas", minimum=0, below=1)
        if self.grad_clip is not None:
            number(self.grad_clip, "grad_clip", above=0)
        seed(self.seed, "seed")
        number(self.keep_checkpoints, "keep_checkpoints", minimum=1, integer=True)
        if not (self.lr > 0 and 0 <= self.min_lr <= self.lr):
            raise ValueError(f"need lr > 0 and 0 <= min_lr <= lr, got lr={self.lr}, min_lr={self.min_lr}")
        if not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"warmup_steps must be in [0, steps={self.steps}], got {self.warmup_steps}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be positive or None, got {self.grad_clip}")
        for name in ("eval_every", "checkpoint_every", "log_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        object.__setattr__(self, "betas", tuple(self.betas))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["betas"] = list(self.betas)
        return data


@dataclass
class TrainResult:
    """What a call to :func:`train` did."""

    step: int  #: updates done in all (including those before a resume)
    interrupted: bool  #: stopped early by Ctrl-C / SIGTERM (a checkpoint was saved if a directory was given)
    history: list[dict[str, float]] = field(default_factory=list)  #: every ``log_every`` updates
    evals: list[dict[str, Any]] = field(default_factory=list)  #: {"step", **metrics}
    checkpoint: str | None = None  #: last checkpoint written
    seconds: float = 0.0  #: wall time of this call
    cpu_seconds: float = 0.0  #: CPU time of this process during this call
    tokens: int = 0  #: supervised tokens seen in this call (all ranks)
    #: wall and CPU seconds (this process) of the whole run: this call plus every call it resumed
    total_seconds: float = 0.0
    total_cpu_seconds: float = 0.0
    stopped_early: bool = False  #: ``stop_when`` said an evaluation was good enough before ``config.steps``
    #: the trained model with its full weights: the module passed in, or under FSDP rank 0's gathered copy
    #: (``posenc.fsdp.Sharded.host``; None on the other ranks, whose module holds only its shards)
    model: nn.Module | None = None

    @property
    def final_loss(self) -> float:
        return self.history[-1]["loss"] if self.history else math.nan


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate of update ``step`` (0-based): linear warm-up, then cosine to ``min_lr``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, config.steps - 1 - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.min_lr + (config.lr - config.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def step_generator(seed: int, step: int, rank: int = 0) -> torch.Generator:
    """A CPU generator seeded from (seed, step, rank) alone — for batch functions."""
    return torch.Generator().manual_seed(((seed * 1_000_003 + step) * 1_009 + rank) % (2**63 - 1))


# -- distributed ------------------------------------------------------------------
@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistInfo:
    """Join the process group when launched by ``torchrun`` (WORLD_SIZE > 1); else a single process.

    Backend: NCCL when CUDA is available, gloo otherwise. Returns this process's place
    and the device it should use.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo(device=torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, device=device)


def dist_info() -> DistInfo:
    """This process's place in an already-initialised process group (or a single process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistInfo()
    cuda = dist.get_backend() == "nccl"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local,
                    device=torch.device("cuda", local) if cuda else torch.device("cpu"))


def _gather_rng(info: DistInfo) -> list[dict[str, Tensor]]:
    """Every rank's RNG state, on every rank (fixed-shape tensors, so all_gather works)."""
    mine = capture_rng()
    if info.world_size == 1:
        return [mine]
    out: list[dict[str, Tensor]] = [{} for _ in range(info.world_size)]
    for key in sorted(mine):
        local = mine[key].to(info.device)
        parts = [torch.empty_like(local) for _ in range(info.world_size)]
        dist.all_gather(parts, local)
        for r, part in enumerate(parts):
            out[r][key] = part.cpu()
    return out


def _agree(info: DistInfo, decision: bool) -> bool:
    """Rank 0's decision on every rank (only rank 0 evaluates)."""
    if info.world_size == 1:
        return decision
    flag = torch.tensor([float(decision)], device=info.device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


# -- Ctrl-C ------------------------------------------------------------------------
@contextmanager
def _stop_on_signal() -> Iterator[dict[str, bool]]:
    """Turn the first SIGINT/SIGTERM into a flag checked between updates; a second SIGINT interrupts at once."""
    flag = {"stop": False}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: Any) -> None:
        if flag["stop"] and signum == signal.SIGINT:
            raise KeyboardInterrupt
        flag["stop"] = True

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# -- the loop ----------------------------------------------------------------------
def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW over every trainable parameter (a tied tensor counts once)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=config.lr, betas=config.betas, eps=config.eps,
                             weight_decay=config.weight_decay)


def _check_resumable(saved: dict[str, Any], config: TrainConfig, extra: dict[str, Any] | None, path: str) -> None:
    """A resume must continue the same run: same trajectory fields, same task/options (``extra_state``)."""
    train_config = saved.get("train_config")
    if not isinstance(train_config, dict):
        raise ValueError(f"checkpoint {path} holds no train_config; it was not written by posenc's train loop")
    step = saved.get("_step", 0)
    if step > config.steps:
        raise ValueError(f"checkpoint {path} is at step {step}, beyond this run's {config.steps} steps")
    now = config.to_dict()
    diff = [f"{k}: checkpoint {train_config.get(k)!r} vs now {now[k]!r}" for k in _TRAJECTORY_FIELDS
            if train_config.get(k) != now[k]]
    # JSON round trip: tuples become lists, keys strings — compare what the checkpoint can hold
    wanted = json.loads(json.dumps(extra or {}, default=str))
    diff += [f"{k}: checkpoint {saved.get(k)!r} vs now {v!r}" for k, v in wanted.items() if saved.get(k) != v]
    for name in ("history", "evals"):
        records = saved.get(name, [])
        if not (isinstance(records, list) and all(isinstance(r, dict) and "step" in r for r in records)):
            raise ValueError(f"checkpoint {path}: '{name}' must be a list of records with a step; "
                             "state.json was edited or is corrupt — resume from another step")
    if diff:
        raise ValueError(f"cannot resume {path}: it was saved by a different run ({'; '.join(diff)}); "
                         "resume with the options it was started with, or give a new checkpoint directory")


def _check_optimizer_settings(optimizer: torch.optim.Optimizer, config: TrainConfig, path: str) -> None:
    """The restored AdamW hyper-parameters must be the config's (state.json is not hashed: check what it set)."""
    wanted = {"betas": tuple(config.betas), "eps": config.eps, "weight_decay": config.weight_decay}
    for group in optimizer.param_groups:
        found = {k: tuple(group.get(k, ())) if k == "betas" else group.get(k) for k in wanted}
        if found != wanted:
            raise ValueError(f"checkpoint {path}: its optimiser settings {found} differ from the run's {wanted}; "
                             "state.json was edited — resume from another step")


def _one_run_per_directory(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``train`` holding its checkpoint directory: a fresh run into another's directory, or two at once, refused."""
    @functools.wraps(fn)
    def locked(*args: Any, **kwargs: Any) -> Any:
        # both are keyword-only in ``train``: no signature to read
        directory, resume = kwargs.get("checkpoint_dir"), kwargs.get("resume", False)
        if directory is None or not dist_info().is_main:
            return fn(*args, **kwargs)
        check_run_dir(directory)
        with run_lock(directory):
            if not resume:
                refuse_existing_run(directory)
            return fn(*args, **kwargs)
    return locked


@_one_run_per_directory
def train(
    model: nn.Module,
    loss_fn: LossFn,
    batches: BatchFn,
    config: TrainConfig,
    *,
    evaluate: EvalFn | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    extra_state: dict[str, Any] | None = None,
    stop_when: StopFn | None = None,
    fsdp: bool = False,
) -> TrainResult:
    """Train ``model`` for ``config.steps`` updates (see the module docstring for the three functions).

    Args:
        model: a module already on this rank's device; wrapped in DDP when a process group is up.
        loss_fn, batches, evaluate: see the module docstring.
        config: the TrainConfig.
        checkpoint_dir: where to save (every ``checkpoint_every``, at the end, and on Ctrl-C).
        resume: continue from the latest checkpoint in ``checkpoint_dir`` (it must exist);
            the continuation is exact: same weights as a run that never stopped.
        extra_state: JSON data stored in every checkpoint (e.g. the task and model options).
        stop_when: called with each periodic evaluation (``{"step", **metrics}``); True ends training
            there (e.g. a convergence gate: stop once held-out accuracy reaches a threshold).
        fsdp: under a process group, shard parameters, gradients and optimiser state over the ranks
            (``posenc.fsdp``: FSDP2, one unit per block) instead of replicating them with DDP; ``model`` is
            sharded in place and the trained weights come back as ``result.model`` on rank 0. The
            checkpoints are the same files either way. Ignored in a single process.

    Returns:
        A TrainResult; ``interrupted`` is True after Ctrl-C/SIGTERM (state saved if a directory was given).

    Raises:
        NonFiniteLossError: the loss or gradient norm became NaN/inf (the message names the step;
            no checkpoint is written for that step).
        ValueError: ``resume`` without a directory, or a checkpoint that does not fit.
    """
    info = dist_info()
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs checkpoint_dir")
    if checkpoint_dir is not None:
        check_run_dir(checkpoint_dir)
    inner = model
    sharding = fsdp and info.world_size > 1
    optimizer = None if sharding else make_optimizer(inner, config)  # a sharded model's once it is sharded
    start, history, evals = 0, [], []
    spent = {"seconds": 0.0, "cpu_seconds": 0.0}  # by the calls this one resumes (saved in every checkpoint)
    if resume:
        if info.is_main:
            clean_temporaries(checkpoint_dir)  # type: ignore[arg-type]
        saved = read_state(checkpoint_dir)  # type: ignore[arg-type]
        _check_resumable({**saved["state"], "_step": saved["step"]}, config, extra_state, saved["path"])
        meta = load_checkpoint(saved["path"], model=inner, optimizer=optimizer, rank=info.rank,
                               world_size=info.world_size)  # a sharded run's optimiser state: once sharded
        start, history, evals = meta["step"], meta["state"].get("history", []), meta["state"].get("evals", [])
        before = meta["state"].get("spent")
        if isinstance(before, dict):  # checkpoints written before this was recorded have none: 0
            spent = {k: float(before.get(k, 0.0)) for k in spent}
    else:
        torch.manual_seed(config.seed + info.rank)
    sharded = None
    if sharding:
        from posenc.fsdp import Sharded

        with torch.no_grad():  # rank 0's weights everywhere, as DDP's constructor broadcasts them
            for tensor in [*inner.parameters(), *inner.buffers()]:
                dist.broadcast(tensor, src=0)
        sharded = Sharded(inner, is_main=info.is_main)
        optimizer = make_optimizer(inner, config)
        if resume:
            sharded.load_optimizer_state(optimizer, read_optimizer_state(meta, type(optimizer).__name__))
    elif info.world_size > 1:
        ids = [info.device.index] if info.device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(inner, device_ids=ids)
    assert optimizer is not None
    if resume:
        _check_optimizer_settings(optimizer, config, saved["path"])
    params = [p for g in optimizer.param_groups for p in g["params"]]

    def totals() -> dict[str, float]:
        return {"seconds": spent["seconds"] + time.perf_counter() - began,
                "cpu_seconds": spent["cpu_seconds"] + time.process_time() - cpu_began}

    began, cpu_began = time.perf_counter(), time.process_time()

    def save(step: int) -> str | None:
        if checkpoint_dir is None:
            return None
        rng = _gather_rng(info)  # collective: every rank takes part
        weights, moments = inner, optimizer
        if sharded is not None:  # collective too: the full tensors, on rank 0
            weights, moments = sharded.gather(step), sharded.optimizer_state(optimizer)
        path = None
        if info.is_main:
            state = {"train_config": config.to_dict(), "scheduler": {"kind": "warmup-cosine", "next_step": step,
                     "lr": lr_at(min(step, config.steps - 1), config)}, "history": history, "evals": evals,
                     "world_size": info.world_size, "spent": totals(), **(extra_state or {})}
            path = str(save_checkpoint(checkpoint_dir, model=weights, step=step, optimizer=moments,
                                       rng_states=rng, state=state, keep_last=config.keep_checkpoints))
        if info.world_size > 1:
            dist.barrier()
        return path

    def run_eval(step: int) -> None:
        if evaluate is None:
            return
        target = inner if sharded is None else sharded.gather(step)  # collective under FSDP
        if not info.is_main or target is None:
            return
        was_training = target.training
        target.eval()
        with torch.no_grad():
            metrics = evaluate(target, step)
        target.train(was_training)
        if evals and evals[-1]["step"] == step:  # re-evaluating a resumed, finished run
            evals.pop()
        evals.append({"step": step, **metrics})

    result = TrainResult(step=start, interrupted=False, history=history, evals=evals)
    from posenc.progress import detail_disabled, detail_position

    beneath = detail_position()  # under a grid's overall bar (lengthgen, finetune grid): the line below it
    bar = tqdm(total=config.steps, initial=start, position=beneath, desc="train", dynamic_ncols=True, leave=False,
               disable=not (config.progress and info.is_main) or (beneath > 0 and detail_disabled()))
    model.train()
    with _stop_on_signal() as flag:
        for step in range(start, config.steps):
            rng_before = capture_rng()  # so that a stop at this update can rewind its forward's random draws
            batch = batches(step, info.rank, info.world_size)
            loss_sum, count = loss_fn(model, batch)
            # One collective per update: global loss sum, global count, and whether anyone wants to stop.
            stats = torch.tensor([float(loss_sum.detach()), float(count), float(flag["stop"])],
                                 dtype=torch.float64, device=info.device)
            if info.world_size > 1:
                dist.all_reduce(stats)
            total_loss, total_count, stop = stats.tolist()
            if stop:
                result.interrupted = True  # this update's forward is discarded; state is that of `step`
                restore_rng(rng_before)
                break
            lr = lr_at(step, config)
            if not math.isfinite(total_loss):
                raise NonFiniteLossError(
                    f"loss is {total_loss} at step {step} (update {step + 1} of {config.steps}, lr {lr:.3g}); "
                    "training stopped before applying it — lower the learning rate or check the data"
                    + (f"; the last checkpoint in {checkpoint_dir} is untouched" if checkpoint_dir else ""))
            if total_count <= 0:
                raise ValueError(f"batch of step {step} has no supervised tokens (count={total_count})")
            (loss_sum * (info.world_size / total_count)).backward()
            norm_t = torch.nn.utils.clip_grad_norm_(params, config.grad_clip or math.inf)
            norm = float(norm_t.full_tensor() if hasattr(norm_t, "full_tensor") else norm_t)  # FSDP: a DTensor
            if not math.isfinite(norm):
                raise NonFiniteLossError(
                    f"gradient norm is {norm} at step {step} (loss {total_loss / total_count:.4g}, lr {lr:.3g}); "
                    "training stopped before applying it — lower the learning rate or check the data"
                    + (f"; the last checkpoint in {checkpoint_dir} is untouched" if checkpoint_dir else ""))
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            done = step + 1
            result.step = done
            result.tokens += int(total_count)
            mean = total_loss / total_count
            if done % max(1, config.log_every) == 0 or done == config.steps:
                history.append({"step": done, "loss": mean, "lr": lr, "grad_norm": norm})
            speed = result.tokens / max(1e-9, time.perf_counter() - began)
            bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)
            bar.update(1)
            if config.eval_every and done % config.eval_every == 0 and done != config.steps:
                run_eval(done)
                if stop_when is not None and _agree(info, bool(evals) and stop_when(evals[-1])):
                    result.stopped_early = True
                    break
            if config.checkpoint_every and done % config.checkpoint_every == 0 and done != config.steps:
                result.checkpoint = save(done)
        bar.close()
        if not (result.interrupted or result.stopped_early):  # an early stop was just evaluated
            run_eval(result.step)
        result.checkpoint = save(result.step) or result.checkpoint
    result.model = inner if sharded is None else sharded.gather(result.step)
    result.seconds, result.cpu_seconds = time.perf_counter() - began, time.process_time() - cpu_began
    result.total_seconds = spent["seconds"] + result.seconds
    result.total_cpu_seconds = spent["cpu_seconds"] + result.cpu_seconds
    if result.interrupted and info.is_main:
        where = f"; saved to {result.checkpoint} (continue with resume / --resume)" if result.checkpoint else ""
        print(f"posenc: interrupted at step {result.step} of {config.steps}{where}", flush=True)
    return result


def resume_step(checkpoint_dir: str | os.PathLike[str]) -> int | None:
    """The step of the latest checkpoint in ``checkpoint_dir``, or None if there is none."""
    try:
        return int(read_state(checkpoint_dir)["step"])
    except FileNotFoundError:
        return None


__all__ = [
    "DistInfo",
    "NonFiniteLossError",
    "TrainConfig",
    "TrainResult",
    "dist_info",
    "init_distributed",
    "lr_at",
    "make_optimizer",
    "resume_step",
    "step_generator",
    "train",
]
