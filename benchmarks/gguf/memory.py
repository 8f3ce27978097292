"""Peak memory of reading / loading a GGUF file (ru_maxrss), one run per process.

PYTHONPATH=src python benchmarks/gguf/memory.py read FILE.gguf
PYTHONPATH=src python benchmarks/gguf/memory.py load FILE.gguf float32|bfloat16
"""
import resource, sys, time, torch, gc
torch.set_num_threads(1)
from posenc.pretrained.gguf import read_gguf
import posenc.pretrained, tokenizers, gguf
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.time()
if sys.argv[1] == "read":
    ck = read_gguf(sys.argv[2])
    n = sum(t.numel() * t.element_size() for t in ck.tensors.values()) / 2**20
else:
    from posenc.pretrained import load_pretrained
    pm = load_pretrained(sys.argv[2], dtype=getattr(torch, sys.argv[3]))
    n = sum(p.numel() * p.element_size() for p in pm.model.parameters()) / 2**20
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{sys.argv[1:]}: {time.time()-t:.1f}s, tensors {n:.0f} MiB, peak RSS {peak:.0f} MiB (after imports {base:.0f} MiB; +{peak-base:.0f})")
