"""Peak memory of ``load_pretrained`` on SmolLM2-135M: HF folder and GGUF, float32 and bfloat16.

Each load runs in a fresh subprocess; the figure is the process's peak RSS
(``ru_maxrss``) minus its RSS after ``import torch, transformers, posenc`` (all
figures MiB over that baseline), next to the size of the loaded weights — a
loader that held two full copies would show about twice the weights. float32
tensors of a safetensors file are memory-mapped (copy-on-write) by the
``safetensors`` package and paged in on first use, so the load itself stays
small and the peak after one forward (every weight touched) is the figure to
compare with the weights.

Usage (after ``bench.py`` has written the float32 folder into ``--work``)::

    python benchmarks/realmodels/memory.py --out benchmarks/realmodels
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench import gguf_path, peak_mib, prepare, rss_mib  # noqa: E402


def measure(path: str, dtype: str) -> dict[str, float]:
    import torch
    import transformers  # noqa: F401

    import posenc.formats.gguf  # noqa: F401
    from posenc.pretrained import load_pretrained

    base = rss_mib()
    model = load_pretrained(path, dtype=dtype).model
    weights = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20  # tied table counted once
    out = {"load_peak_mib": peak_mib() - base, "weights_mib": weights, "rss_after_load_mib": rss_mib() - base}
    with torch.inference_mode():  # touches every weight: float32 safetensors tensors are mapped lazily
        model(torch.zeros(1, 16, dtype=torch.long))
    out |= {"peak_after_forward_mib": peak_mib() - base, "torch": torch.__version__}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/realmodels"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/posenc-realmodels"))
    parser.add_argument("--measure", nargs=2, metavar=("PATH", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    rows = []
    for kind, path in (("HF folder (safetensors)", str(prepare(args.work))), ("GGUF Q4_1", str(gguf_path()))):
        for dtype in ("float32", "bfloat16"):
            proc = subprocess.run([sys.executable, __file__, "--measure", path, dtype], capture_output=True, text=True)
            if proc.returncode:
                sys.exit(proc.stderr[-3000:])
            rows.append({"source": kind, "dtype": dtype, **json.loads(proc.stdout.strip().splitlines()[-1])})
            print(rows[-1], flush=True)
    (args.out / "memory.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["| source | dtype | weights (MiB) | peak during load | RSS after load | peak after a 16-token forward |",
             "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['source']} | {r['dtype']} | {r['weights_mib']:.0f} | {r['load_peak_mib']:.0f} | "
              f"{r['rss_after_load_mib']:.0f} | {r['peak_after_forward_mib']:.0f} |" for r in rows]
    (args.out / "memory.md").write_text("Command: `python benchmarks/realmodels/memory.py --out benchmarks/realmodels`"
                                        "\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
