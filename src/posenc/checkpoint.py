"""Checkpoints: safetensors tensors + JSON everything else, written atomically.

A checkpoint is one directory per saved step plus a pointer to the newest::

    run/
      latest                    "step-00000200" (replaced atomically)
      step-00000200/
        model.safetensors       the model's weights (shared tensors stored once)
        optimizer.safetensors   every tensor of the optimiser state (AdamW moments, step counts)
        rng.safetensors         the RNG states of every rank (torch CPU/CUDA, Python, NumPy)
        state.json              step, model config, train config, scheduler, optimiser
                                hyper-parameters, history, user extras, and the
                                SHA-256 of each tensor file

Nothing is ever unpickled: tensors go through safetensors, the rest through
JSON, so opening a checkpoint someone sent you cannot run code.

Atomicity: a step directory is written under a temporary name in the same
parent directory and renamed into place with ``os.replace``; ``latest`` is
written to a temporary file and ``os.replace``-d too. A crash mid-save leaves
the previous checkpoint and ``latest`` untouched and no partial directory under
the final name. On load, every tensor file's SHA-256 is checked against
``state.json``, so a truncated or edited file fails with a message naming it.

Reference: the safetensors format (huggingface/safetensors); the save/resume
contract follows torchtitan's checkpointer (model, optimiser, scheduler and
RNG state together).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import Tensor, nn

FORMAT = "posenc-checkpoint"
VERSION = 1
LATEST = "latest"
STATE_FILE = "state.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"


# -- small helpers ------------------------------------------------------------
def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel (or any ``.module``) wrapper."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def model_config_dict(model: nn.Module) -> dict[str, Any] | None:
    """``model.config.to_dict()`` when the model has such a config, else None."""
    config = getattr(unwrap(model), "config", None)
    return config.to_dict() if hasattr(config, "to_dict") else None


# -- RNG state as tensors -------------------------------------------------------
def capture_rng() -> dict[str, Tensor]:
    """This process's RNG states (torch CPU, current CUDA device, Python ``random``, NumPy) as tensors.

    Every state becomes a fixed-shape tensor so that ranks can gather them and
    safetensors can store them.
    """
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    out = {
        "torch_cpu": torch.get_rng_state(),
        "python": torch.tensor([version, *internal], dtype=torch.int64),
        "python_gauss": torch.tensor([gauss is not None, gauss or 0.0], dtype=torch.float64),
        "numpy": torch.tensor([*keys.tolist(), pos, has_gauss], dtype=torch.int64),
        "numpy_gauss": torch.tensor([cached], dtype=torch.float64),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["torch_cuda"] = torch.cuda.get_rng_state()
    return out


def restore_rng(state: dict[str, Tensor]) -> None:
    """Inverse of :func:`capture_rng`."""
    torch.set_rng_state(state["torch_cpu"])
    py = state["python"].tolist()
    has_gauss, gauss = state["python_gauss"].tolist()
    random.setstate((int(py[0]), tuple(int(v) for v in py[1:]), gauss if has_gauss else None))
    npy = state["numpy"].tolist()
    keys = np.array(npy[:-2], dtype=np.uint32)
    np.random.set_state(("MT19937", keys, int(npy[-2]), int(npy[-1]), float(state["numpy_gauss"][0])))
    if "torch_cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["torch_cuda"])


# -- optimiser state: tensors to safetensors, the rest to JSON ----------------------
def _split_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict[str, Any]]:
    sd = optimizer.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, Tensor):
                tensors[f"state.{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[key] = value
    meta = {"class": type(optimizer).__name__, "param_groups": sd["param_groups"], "scalars": scalars,
            "tensor_keys": sorted(tensors)}
    return tensors, meta


def _join_optimizer(tensors: dict[str, Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, index, key = name.split(".", 2)
        state.setdefault(int(index), {})[key] = value
    for index, entry in meta["scalars"].items():
        state.setdefault(int(index), {}).update(entry)
    groups = []
    for group in meta["param_groups"]:
        group = dict(group)
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
        groups.append(group)
    return {"state": state, "param_groups": groups}


# -- save ------------------------------------------------------------------------
def save_checkpoint(
    directory: str | os.PathLike[str],
    *,
    model: nn.Module,
    step: int,
    optimizer: torch.optim.Optimizer | None = None,
    rng_states: list[dict[str, Tensor]] | None = None,
    state: dict[str, Any] | None = None,
    keep_last: int = 2,
) -> Path:
    """Write the checkpoint of ``step`` under ``directory`` and point ``latest`` at it.

    Args:
        directory: the run's checkpoint directory (created if missing).
        model: the model (a DDP wrapper is unwrapped); its ``config.to_dict()`` is stored if it has one.
        step: number of optimiser updates done.
        optimizer: its tensors go to ``optimizer.safetensors``, its hyper-parameters to JSON.
        rng_states: one :func:`capture_rng` dict per rank (default: this process only).
        state: extra JSON-serialisable data (train config, scheduler, history, task…).
        keep_last: how many step directories to keep (older ones are deleted); ≥ 1.

    Returns:
        The step directory written.

    Raises:
        ValueError: ``step`` < 0, ``keep_last`` < 1, or ``state`` is not JSON-serialisable.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        inner = unwrap(model)
        save_model(inner, str(tmp / MODEL_FILE))
        meta: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "step": step,
            "model_class": type(inner).__name__, "model_config": model_config_dict(inner),
            "state": state or {},
        }
        if optimizer is not None:
            tensors, meta["optimizer"] = _split_optimizer(optimizer)
            save_file(tensors, str(tmp / OPTIMIZER_FILE))
        ranks = rng_states if rng_states is not None else [capture_rng()]
        save_file({f"rank{r}.{k}": v.detach().cpu().contiguous() for r, s in enumerate(ranks) for k, v in s.items()},
                  str(tmp / RNG_FILE))
        meta["rng_ranks"] = len(ranks)
        meta["files"] = {p.name: _sha256(p) for p in sorted(tmp.iterdir())}
        try:
            text = json.dumps(meta, indent=2, allow_nan=True)
        except TypeError as err:
            raise ValueError(f"checkpoint state must be JSON-serialisable: {err}") from None
        atomic_write_text(tmp / STATE_FILE, text)
        if final.exists():  # the same step saved again (e.g. Ctrl-C right after a periodic save)
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    atomic_write_text(root / LATEST, final.name + "\n")
    steps = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in steps[:-keep_last]:
        if old != final:
            shutil.rmtree(old)
    return final


# -- load ------------------------------------------------------------------------
def resolve(path: str | os.PathLike[str]) -> Path:
    """A step directory, given it or the run directory holding ``latest``.

    Raises:
        FileNotFoundError: nothing there, or no ``latest`` pointer / the step it names.
    """
    path = Path(path)
    if (path / STATE_FILE).exists():
        return path
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}: the directory does not exist")
    pointer = path / LATEST
    if not pointer.exists():
        raise FileNotFoundError(
            f"no checkpoint in {path}: neither {STATE_FILE} (a step directory) nor a '{LATEST}' file "
            "(a run directory written by posenc train)")
    target = path / pointer.read_text(encoding="utf-8").strip()
    if not (target / STATE_FILE).exists():
        raise FileNotFoundError(f"{pointer} names {target.name}, but {target / STATE_FILE} is missing")
    return target


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The verified ``state.json`` of a checkpoint (every tensor file's SHA-256 checked).

    Raises:
        FileNotFoundError: a file listed in the checkpoint is missing.
        ValueError: ``state.json`` is not a posenc checkpoint, or a file's hash does not match.
    """
    step_dir = resolve(path)
    state_path = step_dir / STATE_FILE
    try:
        meta = json.loads(state_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{state_path} is corrupt (not valid JSON: {err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{state_path} is not a posenc checkpoint (format={meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("version") != VERSION:
        raise ValueError(f"{state_path} has checkpoint version {meta.get('version')}; this posenc reads version {VERSION}")
    for name, digest in meta["files"].items():
        file = step_dir / name
        if not file.exists():
            raise FileNotFoundError(f"checkpoint file {file} is missing")
        if _sha256(file) != digest:
            raise ValueError(f"checkpoint file {file} is corrupt: its SHA-256 does not match {STATE_FILE}")
    meta["path"] = str(step_dir)
    return meta


def _check_config(meta: dict[str, Any], model: nn.Module) -> None:
    saved, current = meta.get("model_config"), model_config_dict(model)
    if saved is None or current is None:
        return
    diff = {k: (saved.get(k), current.get(k)) for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)}
    if diff:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs model {b!r}" for k, (a, b) in diff.items())
        raise ValueError(f"checkpoint {meta['path']} was saved from a different model config ({detail})")


def load_weights(path: str | os.PathLike[str], model: nn.Module) -> dict[str, Any]:
    """Load a checkpoint's weights into ``model`` (config checked first); return its state."""
    meta = read_state(path)
    inner = unwrap(model)
    _check_config(meta, inner)
    file = Path(meta["path"]) / MODEL_FILE
    try:
        load_model(inner, str(file), strict=True)
    except (RuntimeError, SafetensorError) as err:
        raise ValueError(f"checkpoint weights {file} do not fit this {type(inner).__name__}: {err}") from None
    return meta


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> dict[str, Any]:
    """Restore model, optimiser and this rank's RNG state; return the checkpoint's state.

    Args:
        path: a run directory (its ``latest`` is used) or a step directory.
        model: receives the weights; its config must equal the saved one.
        optimizer: receives the optimiser state (must be the same class and parameter layout).
        rank, world_size: this process's place; the RNG state of ``rank`` is restored, and
            ``world_size`` must equal the number of ranks saved (else RNG streams could not continue).

    Raises:
        FileNotFoundError: missing checkpoint or file.
        ValueError: corrupt file, different model config or parameter shapes, different
            optimiser class, or a different number of ranks.
    """
    meta = load_weights(path, model)
    step_dir = Path(meta["path"])
    if optimizer is not None:
        saved = meta.get("optimizer")
        if saved is None:
            raise ValueError(f"checkpoint {step_dir} holds no optimiser state; cannot resume training from it")
        if saved["class"] != type(optimizer).__name__:
            raise ValueError(f"checkpoint {step_dir} has {saved['class']} state, the optimiser is {type(optimizer).__name__}")
        tensors = load_file(str(step_dir / OPTIMIZER_FILE)) if (step_dir / OPTIMIZER_FILE).exists() else {}
        try:
            optimizer.load_state_dict(_join_optimizer(tensors, saved))
        except (ValueError, KeyError, RuntimeError) as err:
            raise ValueError(f"optimiser state in {step_dir} does not fit this model's parameters: {err}") from None
    if meta["rng_ranks"] != world_size:
        raise ValueError(
            f"checkpoint {step_dir} was saved by {meta['rng_ranks']} process(es) but {world_size} are resuming; "
            "resume with the same number of processes for an exact continuation")
    rng = load_file(str(step_dir / RNG_FILE))
    prefix = f"rank{rank}."
    restore_rng({k[len(prefix):]: v for k, v in rng.items() if k.startswith(prefix)})
    return meta
