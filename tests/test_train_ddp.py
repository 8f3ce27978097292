"""Two CPU processes under torchrun (gloo) train the same model as one process on the same global batch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

WORKER = textwrap.dedent('''
    import sys
    import torch
    import torch.nn.functional as F
    from safetensors.torch import save_file
    from posenc import ModelConfig, build_decoder_only
    from posenc.train import TrainConfig, init_distributed, step_generator, train

    def main(out, seed, mode="ddp", ckpt=None):
        torch.set_num_threads(1)
        info = init_distributed()

        def build():
            torch.manual_seed(seed)  # same init everywhere (DDP and FSDP also broadcast rank 0's weights)
            return build_decoder_only(ModelConfig(vocab_size=11, dim=32, num_heads=2, num_layers=2,
                                                  position="alibi"))

        def batches(step, rank, world):
            gen = step_generator(seed, step)
            lengths = torch.randint(4, 12, (6,), generator=gen)  # rows with different token counts
            ids = torch.randint(0, 11, (6, 12), generator=gen)
            return ids[rank::world], lengths[rank::world]

        def loss_fn(model, batch):
            ids, lengths = batch
            logits = model(ids[:, :-1])
            keep = torch.arange(11)[None, :] < lengths[:, None] - 1
            loss = F.cross_entropy(logits[keep], ids[:, 1:][keep], reduction="sum")
            return loss, int(keep.sum())

        def evaluate(model, step):  # rank 0 alone, on the whole model (FSDP: the gathered copy)
            loss, count = loss_fn(model, batches(10_000, 0, 1))
            return {"loss": float(loss) / count}

        cfg = TrainConfig(steps=6, lr=1e-2, warmup_steps=2, progress=False, eval_every=3)
        fsdp = mode != "ddp"
        if mode == "fsdp-resume":  # stopped after 3 updates, then a fresh model resumes, as a new process would
            first = train(build(), loss_fn, batches, cfg, evaluate=evaluate, checkpoint_dir=ckpt, fsdp=True,
                          stop_when=lambda e: e["step"] == 3)
            assert first.stopped_early and first.step == 3, (first.stopped_early, first.step)
            result = train(build(), loss_fn, batches, cfg, evaluate=evaluate, checkpoint_dir=ckpt, resume=True,
                           fsdp=True)
        else:
            result = train(build(), loss_fn, batches, cfg, evaluate=evaluate, checkpoint_dir=ckpt, fsdp=fsdp)
        if info.rank == 0:
            state = result.model.state_dict()
            save_file({k: v.contiguous() for k, v in state.items() if k != "head.weight"}, out)
            print("losses", [h["loss"] for h in result.history], "evals", [e["loss"] for e in result.evals])
        if info.world_size > 1:
            torch.distributed.destroy_process_group()

    if __name__ == "__main__":
        main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
''')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(script: Path, out: Path, seed: int, mode: str, ckpt: Path | None = None) -> None:
    """Two gloo processes run the worker (a launch failure — the free port taken before torchrun bound it — once more)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}

    def launch() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
             "--master_port", str(free_port()), str(script), str(out), str(seed), mode,
             *([str(ckpt)] if ckpt else [])],
            env=env, timeout=180, capture_output=True, text=True)

    proc = launch()
    if proc.returncode != 0:
        first = proc.stderr[-1500:]
        if ckpt is not None and ckpt.exists():
            import shutil

            shutil.rmtree(ckpt)
        proc = launch()
        assert proc.returncode == 0, f"first launch:\n{first}\nsecond launch:\n{proc.stderr[-1500:]}"


def _single(tmp_path: Path, seed: int) -> dict[str, torch.Tensor]:
    """The one-process run, in this process."""
    one = tmp_path / "one.safetensors"
    namespace: dict = {"__name__": "worker"}
    exec(compile(WORKER, "worker.py", "exec"), namespace)
    threads = torch.get_num_threads()
    try:
        namespace["main"](str(one), seed)
    finally:
        torch.set_num_threads(threads)
    return load_file(str(one))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_gloo_processes_train_the_same_model_as_one(tmp_path: Path, seed: int, mode: str):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    two = tmp_path / "two.safetensors"
    single = _single(tmp_path, seed)
    _launch(script, two, seed, mode, tmp_path / "ckpt")
    ddp = load_file(str(two))
    assert single.keys() == ddp.keys()
    for key in single:
        if key.endswith("k_proj.bias"):
            # Its true gradient is exactly 0 (a key bias shifts a whole softmax row), so Adam
            # normalises pure rounding noise there: any summation order gives a different value.
            continue
        # Adam normalises each gradient element by its own history: an element whose gradient is near rounding
        # noise at some step takes a step of up to lr whatever its sign, so the two summation orders may part
        # there (measured: seed 912104342, 1 of 1,024 out_proj weights 4e-5 apart, the rest ≤ 4e-6). A real
        # fault (gradients not averaged, a rank's batch or shard lost) moves every element by O(lr) = 1e-2 per step.
        diff = (ddp[key] - single[key]).abs()
        close = diff <= 1e-5 + 1e-4 * single[key].abs()
        assert float(diff.max()) < 1e-3, (key, float(diff.max()))
        assert float(close.float().mean()) >= 0.995, (key, int((~close).sum()), diff.numel())


@pytest.mark.slow
def test_a_sharded_run_stopped_and_resumed_ends_bit_equal(tmp_path: Path, seed: int):
    """FSDP stopped after 3 of 6 updates (checkpoint gathered from the shards) and resumed by a fresh model
    (the checkpoint's optimiser state spread over the shards again) ends bit-equal to the run that never stopped."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    whole, split = tmp_path / "whole.safetensors", tmp_path / "split.safetensors"
    _launch(script, whole, seed, "fsdp", tmp_path / "ckpt-whole")
    _launch(script, split, seed, "fsdp-resume", tmp_path / "ckpt-split")
    a, b = load_file(str(whole)), load_file(str(split))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
