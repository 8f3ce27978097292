"""The int4 kernel against the exact-weight BLAS path of one QuantLinear, by input rows (SmolLM2 Q4_1 layers).

QuantLinear sends inputs of at least DEQUANTISE_ROWS rows to float32 BLAS on the weight re-decoded from the
stored blocks, fewer to torch's int4 kernel; this prints both times for a few of SmolLM2's shapes. Usage::

    PYTHONPATH=src python benchmarks/realmodels/int4_rows.py THREADS ROWS[,ROWS...]
"""
import statistics
import sys
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
import posenc.models.quant as Q
from bench import gguf_path
from posenc.pretrained import load_pretrained
torch.set_num_threads(int(sys.argv[1])); ROWS = [int(r) for r in sys.argv[2].split(",")]
m = load_pretrained(gguf_path()).model
layers = {"gate 1536x576": m.layers[0].ffn.gate_proj, "down 576x1536": m.layers[0].ffn.down_proj, "q 576x576": m.layers[0].attn.q_proj, "head 49152x576 (Q8_0)": m.head}
with torch.no_grad():
    for name, lin in layers.items():
        for rows in ROWS:
            x = torch.randn(1, rows, lin.in_features)
            res = {}
            for mode, thr in (("int4", 10**9), ("exact", 1)):
                Q.DEQUANTISE_ROWS = thr
                lin(x)
                ts = []
                for _ in range(5 if "head" in name else 15):
                    b = time.perf_counter(); lin(x); ts.append(time.perf_counter() - b)
                res[mode] = statistics.median(ts) * 1e3
            print(f"{name:24s} rows {rows:4d}: int4 {res['int4']:8.2f} ms  exact f32 {res['exact']:8.2f} ms  int4/exact {res['int4']/res['exact']:.2f}", flush=True)
