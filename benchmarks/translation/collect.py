"""Copy a comparison's small artefacts (no checkpoints) into benchmarks/translation/recorded/.

    python benchmarks/translation/collect.py runs/translation-compare
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(out: str) -> None:
    src = Path(out)
    dest = HERE / "recorded"
    dest.mkdir(exist_ok=True)
    for name in ("results.json", "results.md", "curves.png"):
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    data = src / "data" / "data.json"
    if data.exists():
        shutil.copy(data, dest / "data.json")
    for run in sorted(p for p in src.iterdir() if (p / "run.json").exists()):
        (dest / run.name).mkdir(exist_ok=True)
        record = json.loads((run / "run.json").read_text())
        record.pop("checkpoint", None)
        (dest / run.name / "run.json").write_text(json.dumps(record, indent=2, ensure_ascii=False))
        for metrics in run.glob("metrics-beam*.json"):
            shutil.copy(metrics, dest / run.name / metrics.name)
    print(f"copied to {dest}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/translation-compare")
