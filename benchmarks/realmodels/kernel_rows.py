"""The decoding kernel against the exact-weight BLAS path of one QuantLinear, by input rows.

QuantLinear sends inputs of fewer than its ``blas_rows`` rows to its kernel — posenc's
(``posenc.kernels``; ``blas_rows`` = ``posenc.models.quant.kernel_blas_rows()``) or, with
``POSENC_KERNELS=0``, PyTorch's int4 kernel (``DEQUANTISE_ROWS``) — and more to float32 BLAS on the
weight re-decoded from the stored blocks; this prints both times (median of repeats, ms) for SmolLM2's
shapes, to choose that threshold. Usage::

    PYTHONPATH=src python benchmarks/realmodels/kernel_rows.py THREADS ROWS[,ROWS...] [bfloat16]
    POSENC_KERNELS=0 PYTHONPATH=src python benchmarks/realmodels/kernel_rows.py ...   # PyTorch's int4 kernel

With ``bfloat16`` the inputs are bfloat16 and BLAS multiplies the weight cast to bfloat16 (on a CPU with AMX
tiles, the route ``QuantLinear`` takes from ``AMX_BF16_BLAS_ROWS`` rows). With float32 inputs on such a CPU a
third column times the bfloat16 band (``AMX_FLOAT32_BAND``: the input and the weight rounded to bfloat16, the
output back in float32) at every row count.

(``as-stored/int4-rows.txt`` was recorded by this script's earlier form, ``int4_rows.py``, int4 kernel only.)
"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

from bench import gguf_path  # noqa: E402
from posenc.models import quant  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

torch.set_num_threads(int(sys.argv[1]))
ROWS = [int(r) for r in sys.argv[2].split(",")]
DTYPE = getattr(torch, sys.argv[3]) if len(sys.argv) > 3 else torch.float32
m = load_pretrained(gguf_path()).model
layers = {"gate 1536x576": m.layers[0].ffn.gate_proj, "down 576x1536": m.layers[0].ffn.down_proj,
          "q 576x576": m.layers[0].attn.q_proj, "head 49152x576 (Q8_0)": m.head}
print(f"kernel: {m.head.describe_kernel()}")
AMX = DTYPE == torch.float32 and quant.AMX_BF16  # float32 inputs may also take the bfloat16 band (AMX_FLOAT32_BAND)
print(f"{'matrix':24} {'rows':>5} {'kernel ms':>10} {'BLAS ms':>9} {'BLAS/kernel':>12}"
      + (f" {'AMX bf16 ms':>12} {'AMX/kernel':>11}" if AMX else ""))
with torch.no_grad():
    for name, lin in layers.items():
        for rows in ROWS:
            x = torch.randn(1, rows, lin.in_features, dtype=DTYPE)
            res = {}
            for mode, threshold in (("kernel", 10**9), ("blas", 1)) + ((("amx", 10**9),) if AMX else ()):
                lin.blas_rows, quant.AMX_BF16 = threshold, mode == "blas" or mode == "amx"
                quant.AMX_FLOAT32_BAND, quant.AMX_BF16_BLAS_ROWS = mode == "amx", 1 if mode == "amx" else 256
                lin(x)
                ts = []
                for _ in range(5 if "head" in name else 15):
                    b = time.perf_counter()
                    lin(x)
                    ts.append(time.perf_counter() - b)
                res[mode] = statistics.median(ts) * 1e3
            print(f"{name:24} {rows:>5} {res['kernel']:>10.3f} {res['blas']:>9.3f} {res['blas'] / res['kernel']:>11.2f}×"
                  + (f" {res['amx']:>12.3f} {res['amx'] / res['kernel']:>10.2f}×" if AMX else ""))
