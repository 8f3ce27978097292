"""A fine-tuning run killed with SIGKILL (kill -9) and resumed ends with bitwise the weights of one never stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from .conftest import save_start, tiny_model

WORKER = textwrap.dedent('''
    import sys, time
    import torch
    import posenc.finetune.data as data
    from posenc.finetune.model import load_start
    from posenc.finetune.run import FinetuneConfig, finetune

    start_dir, text, out, resume, slow = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", float(sys.argv[5])
    torch.set_num_threads(1)
    plain = data.window_batches
    def slowed(*a, **k):  # slow each update down so that the test can kill the run in the middle
        fn = plain(*a, **k)
        def batches(step, rank, world):
            time.sleep(slow)
            return fn(step, rank, world)
        return batches
    data.window_batches = slowed
    cfg = FinetuneConfig(method="rope-yarn", factor=2.0, original_max_len=16, length=32, batch_size=2, steps=12,
                         lr=3e-3, warmup_steps=3, lora_rank=2, lora_targets=("q_proj", "v_proj"), lora_train=("norm",),
                         grad_checkpoint=True, chunk=8, train_text=text, seed=5, checkpoint_every=1)
    torch.manual_seed(1)
    finetune(load_start(start_dir), cfg, out_dir=out, resume=resume, progress=False, log=lambda m: None)
''')


def _launch(script: Path, start: Path, text: Path, out: Path, *, resume: bool, slow: float) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(script), str(start), str(text), str(out), "1" if resume else "0",
                             str(slow)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _latest_step(out: Path) -> int:
    try:
        return int((out / "checkpoints" / "latest").read_text().strip().split("-")[1])
    except (FileNotFoundError, IndexError, ValueError):
        return -1


def _weights_digest(out: Path) -> str:
    step = (out / "checkpoints" / "latest").read_text().strip()
    return json.loads((out / "checkpoints" / step / "state.json").read_text())["files"]["model.safetensors"]


@pytest.mark.slow
def test_resume_after_kill_9_is_bitwise_exact(tmp_path, seed, text_file):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    start = save_start(tmp_path / "start", tiny_model(seed))
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    proc = _launch(script, start, text_file, whole, resume=False, slow=0.0)
    victim = _launch(script, start, text_file, killed, resume=False, slow=0.3)
    deadline = time.monotonic() + 240
    while _latest_step(killed) < 4 and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert victim.poll() is None, f"the run ended before it could be killed: {victim.stderr.read()[-2000:]}"
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    stopped_at = _latest_step(killed)
    assert 4 <= stopped_at < 12
    assert proc.wait(timeout=240) == 0, proc.stderr.read()[-2000:]
    again = _launch(script, start, text_file, killed, resume=True, slow=0.0)
    assert again.wait(timeout=240) == 0, again.stderr.read()[-2000:]
    assert _latest_step(killed) == _latest_step(whole) == 12
    assert _weights_digest(killed) == _weights_digest(whole)  # SHA-256 of model.safetensors: bitwise equal
    history = json.loads((killed / "result.json").read_text())["history"]
    assert [h["step"] for h in history] == list(range(1, 13))
