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
the final name. Saving a step that already exists (Ctrl-C right after a
periodic save, or resuming a finished run) swaps the new directory with the old
one in one ``renameat2(RENAME_EXCHANGE)`` call on Linux, so ``latest`` names a
complete directory at every moment; where that call is missing the old one is
moved aside first and a crash in that gap is repaired on the next save or
resume (the complete new directory is moved into place). Temporary directories
left by a killed process are removed on the next save or resume. On load,
``state.json`` is checked (step in range and equal to its directory's name,
every tensor file listed with its SHA-256, the model config present) and every
tensor file's SHA-256 is verified, so a truncated or edited file fails with a
message naming it.

Reference: the safetensors format (huggingface/safetensors); the save/resume
contract follows torchtitan's checkpointer (model, optimiser, scheduler and
RNG state together).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import Tensor, nn

from posenc.validation import regular_file

FORMAT = "posenc-checkpoint"
VERSION = 1
LATEST = "latest"
STATE_FILE = "state.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
#: Name of a step directory; temporary ones are ``.tmp-<name>-<pid>`` (being written) and ``.old-<name>-<pid>``
#: (the previous copy of a step being saved again).
STEP_PATTERN = re.compile(r"step-(\d{8,})")
TEMP_PATTERN = re.compile(r"\.(tmp|old)-(step-\d{8,})-(\d+)")


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
@dataclass(frozen=True)
class OptimizerState:
    """An optimiser's ``state_dict()`` held apart from the optimiser (integer parameter indices, as torch's).

    What a sharded run (``posenc.fsdp``) gathers on rank 0 and writes in place of a live optimiser, so the
    checkpoint is the one a single process writes.
    """

    class_name: str
    state_dict: dict[str, Any]


def _split_optimizer(optimizer: torch.optim.Optimizer | OptimizerState) -> tuple[dict[str, Tensor], dict[str, Any]]:
    if isinstance(optimizer, OptimizerState):
        sd, name = optimizer.state_dict, optimizer.class_name
    else:
        sd, name = optimizer.state_dict(), type(optimizer).__name__
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, Tensor):
                tensors[f"state.{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[key] = value
    meta = {"class": name, "param_groups": sd["param_groups"], "scalars": scalars,
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
    optimizer: torch.optim.Optimizer | OptimizerState | None = None,
    rng_states: list[dict[str, Tensor]] | None = None,
    state: dict[str, Any] | None = None,
    keep_last: int = 2,
) -> Path:
    """Write the checkpoint of ``step`` under ``directory`` and point ``latest`` at it.

    Args:
        directory: the run's checkpoint directory (created if missing).
        model: the model (a DDP wrapper is unwrapped); its ``config.to_dict()`` is stored if it has one.
        step: number of optimiser updates done.
        optimizer: its tensors go to ``optimizer.safetensors``, its hyper-parameters to JSON (a live optimiser,
            or an :class:`OptimizerState` gathered from a sharded one).
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
    check_run_dir(root)
    root.mkdir(parents=True, exist_ok=True)
    clean_temporaries(root)
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
            text = json.dumps(meta, indent=2, allow_nan=True)  # history may hold NaN; read back by Python
        except TypeError as err:
            raise ValueError(f"checkpoint state must be JSON-serialisable: {err}") from None
        atomic_write_text(tmp / STATE_FILE, text)
        _move_into_place(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    atomic_write_text(root / LATEST, final.name + "\n")
    steps = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in steps[:-keep_last]:
        if old != final:
            shutil.rmtree(old)
    return final


# -- moving directories into place ---------------------------------------------------
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` atomically (Linux ``renameat2``); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # filesystem or kernel without it
        return False
    raise OSError(ctypes.get_errno(), f"cannot swap {a} and {b}: {os.strerror(ctypes.get_errno())}")


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename the complete directory ``tmp`` to ``final``, replacing an older ``final`` without a gap."""
    if not final.exists():
        os.replace(tmp, final)
        return
    if _exchange(tmp, final):  # final is now the new copy, tmp the old one (removed by the caller)
        return
    old = final.parent / f".old-{final.name}-{os.getpid()}"
    os.replace(final, old)  # a crash here is repaired by _recover: tmp is complete
    os.replace(tmp, final)
    shutil.rmtree(old)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _complete(step_dir: Path) -> bool:
    try:
        read_state(step_dir)
    except (OSError, ValueError):
        return False
    return True


def _recover(root: Path, name: str) -> Path | None:
    """After a crash in the middle of re-saving step ``name``: move its complete copy back into place."""
    final = root / name
    candidates = sorted(root.glob(f".tmp-{name}-*")) + sorted(root.glob(f".old-{name}-*"))
    for candidate in candidates:  # the new copy first, then the old one
        if candidate.is_dir() and _complete(candidate):
            os.replace(candidate, final)
            return final
    return None


def clean_temporaries(root: str | os.PathLike[str]) -> list[Path]:
    """Remove temporary directories and files left in a run directory by processes that no longer run.

    A step whose only complete copy is a temporary one (a crash while re-saving it) is first moved
    back into place. Returns what was removed.
    """
    root = Path(root)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for path in sorted(root.iterdir()):
        match = TEMP_PATTERN.fullmatch(path.name)
        if match is None or _pid_alive(int(match.group(3))):
            continue
        if not (root / match.group(2)).exists():
            _recover(root, match.group(2))
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    for path in root.glob(f".{LATEST}.tmp-*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _pid_alive(int(pid)):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def check_run_dir(path: str | os.PathLike[str]) -> None:
    """Refuse a step directory (or a file) where a run directory is expected.

    ``--checkpoint-dir run/step-00000200`` would nest new checkpoints inside an
    old one, and every later resume would start from the old step again.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"checkpoint directory {path} is a file; give a directory (it is created if missing)")
    if (path / STATE_FILE).exists() or STEP_PATTERN.fullmatch(path.name):
        raise ValueError(f"{path} is a step directory of a checkpoint, not a run directory; "
                         f"give the run directory that holds it and '{LATEST}': {path.parent}")


#: The file a running ``train`` holds an exclusive lock on, in its run directory.
LOCK_FILE = ".lock"
#: the results folder's record of the command that wrote it (posenc.cli_options.claim_folder)
FOLDER_FILE = "posenc-folder.json"


def refuse_existing_run(path: str | os.PathLike[str]) -> None:
    """Refuse a fresh run into a directory that already holds another run's checkpoints.

    Its ``latest`` and step directories would mix with the new run's, and a later
    resume would continue whichever step happened to be newest.
    """
    path = Path(path)
    if not path.is_dir():
        return
    steps = sorted(p.name for p in path.iterdir() if STEP_PATTERN.fullmatch(p.name))
    if (path / LATEST).exists() or steps:
        held = ((path / LATEST).read_text(encoding="utf-8").strip()[:80] if (path / LATEST).is_file()
                else steps[-1] if steps else LATEST)
        raise ValueError(f"checkpoint directory {path} already holds a run (latest: {held}); continue it with "
                         "--resume (resume=True), or give a new directory — a fresh run there would mix two runs")


class RunInUse(ValueError):
    """``run_lock``'s refusal: another live process holds the directory (a ValueError, as every refusal is)."""


@contextmanager
def run_lock(path: str | os.PathLike[str], *, what: str = "checkpoint directory",
             fix: str = "wait for it to finish, or give another directory") -> Iterator[None]:
    """Hold an exclusive lock on run directory ``path`` (created if missing) while the body runs.

    A second process writing into the same directory (a ``train`` run, an ``extend``
    grid) is refused at once, naming the holder's pid and command line, instead of
    racing the first for ``latest`` or a cell file. The lock is ``flock`` on
    ``path/.lock``: the kernel releases it when the holder exits, even after ``kill -9``.
    Where ``flock`` is unavailable (not POSIX) nothing is locked. A directory the lock
    created and nothing wrote into (the run was refused or failed before its first file)
    is removed again, while still held, so a refusal leaves nothing behind. The lock file itself is
    removed as the holder ends (normally or by an exception); one left by a holder that was killed is
    taken over, with a line on stderr naming its pid.

    Args:
        what: the directory's name in the refusal ("checkpoint directory", "--out folder").
        fix: what the refusal tells the user to do instead.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path = Path(path)
    created = not path.exists()
    for attempt in (1, 2):
        path.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            break
        except FileNotFoundError:  # a run that left the directory empty removed it in between: make it again
            if attempt == 2:
                raise
    held = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, _, command = os.pread(fd, 1024, 0).decode(errors="replace").partition("\n")
            started = f", started as `{command.strip()}`" if command.strip() else ""
            raise RunInUse(f"{what} {path} is in use by another posenc run (pid {pid.strip() or 'unknown'})"
                             f"{started}; {fix}") from None
        if not _same_file(fd, path / LOCK_FILE):  # its holder removed it as it ended: lock the file there now
            os.close(fd)
            fd = -1
            yield from _retry(path, what, fix)
            return
        held = True
        _say_if_stale(fd, path, what)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{_command_line()}".encode(), 0)
        yield
    finally:
        if held:
            if created:
                _remove_if_only_the_lock(path)
            _unlink_if_same(fd, path / LOCK_FILE)  # no .lock left behind: removed while still held
        if fd >= 0:
            os.close(fd)  # closing releases the lock


def _retry(path: Path, what: str, fix: str) -> Iterator[None]:
    with run_lock(path, what=what, fix=fix):
        yield


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file open as ``fd`` (not removed, nor replaced, by a holder that ended)."""
    try:
        mine, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _unlink_if_same(fd: int, path: Path) -> None:
    try:
        if _same_file(fd, path):
            path.unlink()
    except OSError:
        pass


def _say_if_stale(fd: int, path: Path, what: str) -> None:
    """A lock file that names another process, found unheld: its run ended without removing it (killed). Say so on
    stderr and take it over."""
    pid, _, command = os.pread(fd, 1024, 0).decode(errors="replace").partition("\n")
    pid = pid.strip()
    if not pid or pid == str(os.getpid()):
        return
    alive = False
    if pid.isdigit():
        try:
            os.kill(int(pid), 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except (PermissionError, OverflowError):
            alive = True
    state = "no longer holds it" if alive else "is no longer running"
    started = f" (`{command.strip()}`)" if command.strip() else ""
    print(f"posenc: {what} {path}: taking over the stale lock of pid {pid}{started}, which {state}",
          file=sys.stderr, flush=True)


def _remove_if_only_the_lock(path: Path) -> None:
    """Remove directory ``path`` if it holds nothing but the lock file and the folder's command record (called by its
    holder)."""
    try:
        names = sorted(p.name for p in path.iterdir())
        if LOCK_FILE in names and set(names) <= {LOCK_FILE, FOLDER_FILE}:
            (path / FOLDER_FILE).unlink(missing_ok=True)
            (path / LOCK_FILE).unlink()
            path.rmdir()  # fails, and is left, if another run made its own lock file there meanwhile
    except OSError:
        pass


def _command_line() -> str:
    """This process's command line as a user typed it (``posenc …`` for the CLI), at most 300 characters."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if program in ("cli.py", "__main__.py", "posenc"):
        program = "posenc"
    return shlex.join([program, *sys.argv[1:]])[:300]


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
    name = regular_file(pointer, f"'{LATEST}' file").read_text(encoding="utf-8").strip()
    if not STEP_PATTERN.fullmatch(name):
        raise ValueError(f"{pointer} holds {name[:80]!r}, not a step directory name like step-00000200; "
                         f"write the name of the newest step directory into it")
    target = path / name
    if not target.exists():
        _recover(path, name)
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
    state_path = regular_file(step_dir / STATE_FILE, STATE_FILE)  # a FIFO would block the read
    try:
        meta = json.loads(state_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{state_path} is corrupt (not valid JSON: {err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{state_path} is not a posenc checkpoint (format={meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("version") != VERSION:
        raise ValueError(f"{state_path} has checkpoint version {meta.get('version')}; this posenc reads version {VERSION}")
    _check_meta(meta, step_dir)
    for name, digest in meta["files"].items():
        file = step_dir / name
        if not file.exists():
            raise FileNotFoundError(f"checkpoint file {file} is missing")
        regular_file(file, "checkpoint file")  # a FIFO is refused by name, not called missing or read
        if _sha256(file) != digest:
            raise ValueError(f"checkpoint file {file} is corrupt: its SHA-256 does not match {STATE_FILE}")
    meta["path"] = str(step_dir)
    return meta


def _check_meta(meta: dict[str, Any], step_dir: Path) -> None:
    """Refuse a ``state.json`` that would turn checks off or point elsewhere (before any file is read)."""
    where = step_dir / STATE_FILE
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{where}: step must be an integer >= 0, got {step!r}; the file was edited or is corrupt")
    match = STEP_PATTERN.fullmatch(step_dir.name)
    if match is not None and int(match.group(1)) != step:
        raise ValueError(f"{where}: says step {step} but lies in {step_dir.name}; the file was edited or moved — "
                         "restore it, or resume from another step directory")
    files = meta.get("files")
    needed = {MODEL_FILE, RNG_FILE} | ({OPTIMIZER_FILE} if meta.get("optimizer") is not None else set())
    if not isinstance(files, dict) or not needed <= set(files):
        missing = sorted(needed - set(files)) if isinstance(files, dict) else sorted(needed)
        raise ValueError(f"{where}: the 'files' map must list every tensor file with its SHA-256; "
                         f"missing {missing}. The checkpoint cannot be verified; resume from another step")
    for name, digest in files.items():
        if (not isinstance(name, str) or "/" in name or "\\" in name or name.startswith(".")
                or not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise ValueError(f"{where}: malformed 'files' entry {name!r}: {digest!r} (a file name and a SHA-256)")
    if "model_config" not in meta or not (meta["model_config"] is None or isinstance(meta["model_config"], dict)):
        raise ValueError(f"{where}: 'model_config' must be present (an object, or null for a model without one)")
    if not isinstance(meta.get("state", {}), dict):
        raise ValueError(f"{where}: 'state' must be an object")
    optimizer = meta.get("optimizer")
    if optimizer is not None and not (
            isinstance(optimizer, dict) and isinstance(optimizer.get("class"), str)
            and isinstance(optimizer.get("param_groups"), list)
            and all(isinstance(g, dict) for g in optimizer["param_groups"])
            and isinstance(optimizer.get("scalars"), dict)
            and all(isinstance(v, dict) for v in optimizer["scalars"].values())):
        raise ValueError(f"{where}: 'optimizer' must be an object with class, param_groups and scalars; "
                         "the file was edited or is corrupt — resume from another step")
    ranks = meta.get("rng_ranks")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"{where}: rng_ranks must be an integer >= 1, got {ranks!r}")


def _check_config(meta: dict[str, Any], model: nn.Module) -> None:
    saved, current = meta.get("model_config"), model_config_dict(model)
    if saved is None and current is None:
        return
    if saved is None or current is None:
        raise ValueError(f"checkpoint {meta['path']} was saved "
                         + ("without a model config, but this model has one" if saved is None
                            else f"from a model with a config ({type(model).__name__} has none)")
                         + "; load it into the kind of model that wrote it")
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


def read_optimizer_state(meta: dict[str, Any], class_name: str) -> dict[str, Any]:
    """The optimiser ``state_dict()`` of a checkpoint (``meta`` from :func:`read_state`), checked to be ``class_name``'s.

    Raises:
        ValueError: the checkpoint holds no optimiser state, or another optimiser's.
    """
    step_dir = Path(meta["path"])
    saved = meta.get("optimizer")
    if saved is None:
        raise ValueError(f"checkpoint {step_dir} holds no optimiser state; cannot resume training from it")
    if saved["class"] != class_name:
        raise ValueError(f"checkpoint {step_dir} has {saved['class']} state, the optimiser is {class_name}")
    tensors = load_file(str(step_dir / OPTIMIZER_FILE)) if (step_dir / OPTIMIZER_FILE).exists() else {}
    return _join_optimizer(tensors, saved)


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
        saved = read_optimizer_state(meta, type(optimizer).__name__)
        try:
            optimizer.load_state_dict(saved)
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as err:
            raise ValueError(f"optimiser state in {step_dir} does not fit this model's parameters: {err}") from None
    if meta["rng_ranks"] != world_size:
        raise ValueError(
            f"checkpoint {step_dir} was saved by {meta['rng_ranks']} process(es) but {world_size} are resuming; "
            "resume with the same number of processes for an exact continuation")
    rng = load_file(str(step_dir / RNG_FILE))
    prefix = f"rank{rank}."
    restore_rng({k[len(prefix):]: v for k, v in rng.items() if k.startswith(prefix)})
    return meta
