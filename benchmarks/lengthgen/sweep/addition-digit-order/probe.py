"""One addition cell (4 layers, width 64 unless --dim) with a chosen digit order, gate size and learning rate.

The probes that chose addition's preset (benchmarks/lengthgen/README.md, "Addition"). Run from the
repository root, one torch thread:

    PYTHONPATH=src python benchmarks/lengthgen/sweep/addition-digit-order/probe.py SCHEME SEED \
        --answer lsd --operands msd --gate-examples 100 [--lr 5e-3] [--steps 12000]

Prints the cell's outcome as one JSON line (the test hits per length are in ``accuracy``).
"""

import argparse
import json

import torch

from posenc.lengthgen import DEFAULT, train_cell

p = argparse.ArgumentParser()
p.add_argument("scheme")
p.add_argument("seed", type=int)
p.add_argument("--answer", default="lsd")
p.add_argument("--operands", default="msd")
p.add_argument("--gate-examples", type=int, default=100)
p.add_argument("--lr", type=float, default=5e-3)
p.add_argument("--steps", type=int, default=12000)
p.add_argument("--dim", type=int, default=64)
a = p.parse_args()
torch.set_num_threads(1)
config = DEFAULT.with_changes(model={"dim": a.dim}, gate_examples=a.gate_examples,
                              task_options={"answer_order": a.answer, "operand_order": a.operands},
                              train={"steps": a.steps, "lr": a.lr, "min_lr": a.lr / 10})
cell = train_cell("addition", a.scheme, seed=a.seed, config=config)
keys = ("scheme", "seed", "task_options", "learned", "steps", "in_range", "beyond", "cpu_seconds", "accuracy")
print(json.dumps({**{k: cell[k] for k in keys}, "gate_accuracy": cell["gate"]["accuracy"],
                  "gate_curve": cell["gate"]["curve"][::10]}))
