"""Performance benchmarks against peer implementations: ``posenc bench``.

Suites (``SUITES``): ``rope`` (application, fwd and fwd+bwd, both pairings,
partial rotation, fp32 and bf16, vs HF / torchtune / Meta / torch.compile),
``angles`` (cos/sin accuracy at large positions and cost), ``additive``
(x + PE vs one read-add-write), ``bias`` (what an ALiBi attention hands the
kernel and its memory), ``attention`` (SDPA vs naive softmax: time, peak
memory), ``train`` (posenc's EncoderDecoder vs torch.nn.Transformer: tokens/s,
peak memory), ``lab`` (the lab's measures at scale, when the lab is installed),
``compile`` (eager vs torch.compile, training and decoding tokens/s, compile
time apart: posenc RoPE/ALiBi/T5 vs torch.nn.Transformer, and posenc Decoder
vs HF LlamaForCausalLM on the same weights).

Every peer is checked against posenc before it is timed; see
``posenc.bench.timing`` for how allocation effects are controlled.

Tiny example::

    from posenc.bench import run
    result = run(["rope"], size="tiny", allocators=["default"])
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm import tqdm

from posenc.bench import suites as _suites
from posenc.bench.timing import allocator, load_average, machine_info

#: suite name → runs once per allocator mode (in-process timings) or once (own processes / accuracy)
SUITES: dict[str, bool] = {
    "rope": True, "angles": False, "additive": True, "bias": True, "attention": False, "train": False, "lab": False,
    "compile": False,
}


def _run_suite(name: str, size: str, *, compile_peers: bool, gen: torch.Generator) -> list[_suites.Case]:
    if name == "rope":
        return _suites.rope_cases(size, compile_peers=compile_peers, generator=gen)
    if name == "angles":
        return _suites.angle_cases(size)
    if name == "additive":
        return _suites.additive_cases(size, generator=gen)
    if name == "bias":
        return _suites.bias_cases(size, generator=gen)
    if name == "attention":
        return _suites.attention_cases(size, generator=gen)
    if name == "train":
        return _suites.train_cases(size)
    if name == "lab":
        return _suites.lab_cases(size)
    if name == "compile":
        return _suites.compile_cases(size)
    raise ValueError(f"unknown suite {name!r}; valid: {', '.join(SUITES)}")


def run(
    suites: Sequence[str],
    *,
    size: str = "small",
    allocators: Sequence[str] = ("default", "reuse"),
    compile_peers: bool = False,
    seed: int = 0,
    command: str = "",
    progress: bool = False,
) -> dict[str, Any]:
    """Run the named suites; return plain data (machine, command, cases).

    Suites that time in this process run once per allocator mode, "default"
    first (switching to "reuse" cannot be undone within a process); the others
    run once, before the switch.
    """
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; valid: {', '.join(SUITES)}")
    if size not in _suites.SIZES:
        raise ValueError(f"unknown size {size!r}; valid: {', '.join(_suites.SIZES)}")
    bad = [a for a in allocators if a not in ("default", "reuse")]
    if bad or not allocators:
        raise ValueError(f"allocators must be a non-empty list of 'default'/'reuse', got {list(allocators)}")
    ordered_modes = [m for m in ("default", "reuse") if m in allocators]
    machine = machine_info()
    start = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    plan = [(s, None) for s in suites if not SUITES[s]]
    plan += [(s, m) for m in ordered_modes for s in suites if SUITES[s]]
    cases: list[dict[str, Any]] = []
    current = "default"
    for name, mode in tqdm(plan, desc="posenc bench", disable=not progress):
        if mode is not None and mode != current:
            got = allocator(mode)
            current = mode if got == mode else current
            if got != mode:
                cases.append({"suite": name, "name": f"allocator {mode}", "floor": None, "posenc": None,
                              "stats": {}, "facts": {"skipped": f"allocator mode {mode} is {got} here"}})
                continue
        for case in _run_suite(name, size, compile_peers=compile_peers, gen=gen):
            if mode is not None:
                case.facts["allocator"] = mode
            cases.append(case.to_dict())
    after = load_average()
    cpus = machine["logical_cpus"] or 1
    before = machine["load_average"][:1]
    # loaded: others were busy before we started, or more than the CPUs were busy while we ran
    loaded = bool(before and before[0] > 0.5 * cpus) or bool(after[:1] and after[0] > cpus)
    return {"command": command, "size": size, "machine": machine, "load_average_after": after, "loaded": loaded,
            "elapsed_s": time.perf_counter() - start, "cases": cases}
