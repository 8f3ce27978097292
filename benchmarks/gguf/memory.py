"""Peak memory of reading / loading a GGUF file (ru_maxrss), one run per process.

    PYTHONPATH=src python benchmarks/gguf/memory.py read FILE.gguf
    PYTHONPATH=src python benchmarks/gguf/memory.py load FILE.gguf float32|bfloat16
"""

import resource
import sys
import time

import torch

import posenc.pretrained  # noqa: F401  (imports counted in the baseline)
from posenc.formats.gguf import read_gguf

torch.set_num_threads(1)
mib = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # noqa: E731  (KiB on Linux)
base = mib()
t = time.time()
if sys.argv[1] == "read":
    ck = read_gguf(sys.argv[2])
    n = sum(x.numel() * x.element_size() for x in ck.tensors.values()) / 2**20
else:
    from posenc.pretrained import load_pretrained

    pm = load_pretrained(sys.argv[2], dtype=getattr(torch, sys.argv[3]))
    n = sum(p.numel() * p.element_size() for p in pm.model.parameters()) / 2**20
peak = mib()
print(f"{sys.argv[1:]}: {time.time() - t:.1f}s, tensors {n:.0f} MiB, peak RSS {peak:.0f} MiB "
      f"(after imports {base:.0f} MiB; +{peak - base:.0f})")
