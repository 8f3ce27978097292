"""`posenc rope --engines all` on tiny HF configs of every RoPE kind (the configs of tests/ropecheck/test_engines.py).

    .venv/bin/python benchmarks/rope/engines_tiny.py > benchmarks/rope/engines-tiny.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "ropecheck"))

import test_engines as zoo  # noqa: E402

from posenc.commands.engines import engine_lines  # noqa: E402
from posenc.ropecheck import engines  # noqa: E402

CONFIGS = {"llama (plain, base 5e5)": zoo.llama(rope_theta=500000.0), "llama yarn": zoo.YARN,
           "llama yarn mscale 1 / 0.5": zoo.YARN_MSCALE, "llama yarn attention_factor 1.3": zoo.YARN_EXPLICIT,
           "llama 3.1 scaling": zoo.LLAMA3, "llama dynamic NTK": zoo.DYNAMIC, "phi3 longrope": zoo.LONGROPE,
           "llama yarn, transformers-5 rope_parameters only": zoo.TF5, "gemma3_text linear 8 on global": zoo.GEMMA3}

for title, config in CONFIGS.items():
    rows = engines.compare(zoo.cases(config), list(engines.ENGINE_NAMES[:5]))
    print(f"== {title}")
    print("\n".join(line for line in engine_lines(rows)[1:]))
    print()
