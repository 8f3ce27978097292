"""`posenc finetune run` under torchrun: two gloo processes train the same model as one process.

Both ways of spreading the work: DDP (every process holds the whole model) and FSDP (``--fsdp``: weights,
gradients and AdamW's moments sharded over the two processes, gathered to rank 0 for each checkpoint).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from .conftest import save_start, tiny_model


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(nproc: int, start: Path, text: Path, out: Path, lora: bool, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    args = ["finetune", "run", str(start), "--method", "rope-ntk", "--factor", "2", "--length", "24", "--steps", "5",
            "--batch-size", "4", "--lr", "3e-3", "--warmup", "2", "--train-text", str(text), "--eval-length", "0",
            "--out", str(out), "--quiet", "--threads", "1", "--seed", "3", "--chunk", "7"]
    if lora:
        args += ["--lora-rank", "2", "--lora-train", "norm"]
    args += list(extra)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
                "127.0.0.1", "--master_port", str(_free_port()), "-m", "posenc"]
    for _ in range(2):  # a launch failure (the free port taken before torchrun bound it): once more
        proc = subprocess.run(launcher + args, env=env, timeout=300, capture_output=True, text=True)
        if proc.returncode == 0:
            break
    return proc


def _weights(out: Path) -> dict[str, torch.Tensor]:
    step = (out / "checkpoints" / "latest").read_text().strip()
    return load_file(str(out / "checkpoints" / step / "model.safetensors"))


@pytest.mark.slow
@pytest.mark.parametrize(("lora", "parallel"), [(False, "ddp"), (True, "ddp"), (False, "fsdp"), (True, "fsdp")])
def test_two_processes_fine_tune_the_same_model_as_one(tmp_path, seed, text_file, lora, parallel):
    start = save_start(tmp_path / "start", tiny_model(seed))
    extra = ["--fsdp"] if parallel == "fsdp" else []
    for n in (1, 2):
        proc = _run(n, start, text_file, tmp_path / f"n{n}", lora, *(extra if n == 2 else []))
        assert proc.returncode == 0, proc.stderr[-2000:]
    one, two = _weights(tmp_path / "n1"), _weights(tmp_path / "n2")
    assert one.keys() == two.keys()
    moved = 0
    base = _weights_of_start(start)
    for key in one:
        if key.endswith("k_proj.bias"):
            continue  # no biases here; kept for symmetry with tests/test_train_ddp.py
        # atol 1e-4, not 1e-5: AdamW divides by √v, so an element whose gradient is near zero turns a
        # reduction-order difference (two processes' all-reduce against one process's sum) into up to a few
        # 1e-5 (seed 583128492: one v_proj element of 1,024 moved 4.8e-5); a process that skipped the
        # all-reduce would step on half the batch and move elements by ~lr = 3e-3
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-4, msg=key)
        moved += key in base and not torch.equal(one[key], base[key])
    assert moved > 0  # training changed something
    # the optimiser state written from the shards is the one process's, under the same integer indices
    o1, o2 = _optimizer(tmp_path / "n1"), _optimizer(tmp_path / "n2")
    assert o1.keys() == o2.keys() and o1
    for key in o1:
        torch.testing.assert_close(o2[key], o1[key], rtol=1e-3, atol=1e-6, msg=key)


def _optimizer(out: Path) -> dict[str, torch.Tensor]:
    step = (out / "checkpoints" / "latest").read_text().strip()
    return load_file(str(out / "checkpoints" / step / "optimizer.safetensors"))


def _weights_of_start(start: Path) -> dict[str, torch.Tensor]:
    step = (start / "latest").read_text().strip()
    return load_file(str(start / step / "model.safetensors"))
