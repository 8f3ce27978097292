"""Copy the replication's pretrained model into the records without its optimiser state (19 of 58 MB).

    python benchmarks/finetune/mini/keep_pretrained.py runs/replication/pretrain benchmarks/finetune/mini/pretrain

Writes DEST/checkpoints/step-NNNNNNNN (weights, RNG, state; a checkpoint that ``load_start`` reads and that
cannot resume training) and copies result.json and before.json beside it, so that ``posenc finetune grid``
finds the pretraining done (``run-mini.sh`` copies DEST into a fresh OUT).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from posenc.checkpoint import load_weights, read_state, save_checkpoint
from posenc.models.decoder import DecoderConfig, build_decoder


def main(src: Path, dest: Path) -> None:
    meta = read_state(src / "checkpoints")
    model = build_decoder(DecoderConfig.from_dict(meta["model_config"]))
    load_weights(src / "checkpoints", model)
    if dest.exists():
        shutil.rmtree(dest)
    written = save_checkpoint(dest / "checkpoints", model=model, step=meta["step"], optimizer=None,
                              state={k: v for k, v in meta["state"].items() if k not in ("history", "evals")},
                              keep_last=1)
    for name in ("result.json", "before.json"):
        shutil.copyfile(src / name, dest / name)
    print(f"{written}: {sum(p.stat().st_size for p in written.iterdir()) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
