"""posenc against llama.cpp's own programs, on the same GGUF files, whole processes, interleaved rounds.

    sh benchmarks/llamacpp/setup.sh /tmp/posenc-llamacpp-bin          # builds llama.cpp; prints BIN
    python benchmarks/llamacpp/bench.py --bin BIN --rounds 5 --threads 1 2 --out benchmarks/llamacpp

Per model (SmolLM2-135M Q4_1, Gemma 3 270M Q4_K_M) and thread count, every round runs each test once for
each program, the programs' order alternating from round to round:

- ``speed``: ``llama-bench -p 128,2048 -n 64 -d 128`` with flash attention off and on (``-fa 0|1``, one
  repetition) and ``posenc_speed.py`` (the same tests in posenc) → tokens/s of prefill 128 and 2,048, and of
  64 decoded tokens after 128.
- ``generate``: ``llama-completion`` vs ``posenc generate`` on a 128-token prompt + 64 new tokens, greedy:
  whole-process peak RSS and wall time from ``/usr/bin/time -v``.
- ``prefill2048``: the same with a 2,048-token prompt and 1 new token.
- ``load``: a fresh process until its first token is out (a one-word prompt, 1 new token): wall time.
- ``score8192``: ``llama-perplexity -c 8192 --chunks 1`` vs ``posenc perplexity --window 8192 --stride
  8192 --max-tokens 8192`` on the same text: peak RSS, wall, tokens/s.

llama.cpp's context (``-c``) is sized to the work (prompt + new tokens, rounded up to 256), as a user who
cares about memory sets it; its default (the model's trained context) allocates the whole KV cache up front.

A **quiet gate** keeps a run only if the rest of the machine stayed idle: before each run it waits (up to
``--wait`` s) until the machine's other work is under ``--busy`` cores, and after it compares the machine's
busy time (``/proc/stat``) with the run's own CPU time; a run during which other work took more than
``--busy`` cores on average is discarded and repeated (up to twice), and counted in the results.

Every run is appended to ``runs.jsonl`` in ``--out`` as it ends (an interrupted bench resumes where it
stopped); ``results.json`` / ``results.md`` / ``ratios.png`` are rebuilt from it by every invocation
(``--report`` only rebuilds them). ``--stream`` measures this machine's single-core memory bandwidth (a
STREAM-like copy) for the decode limit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "realmodels"))
TEXTS = [Path("/usr/share/common-licenses") / n for n in ("GPL-3", "GPL-2", "LGPL-2.1", "Apache-2.0", "MPL-2.0",
                                                          "GFDL-1.3", "Artistic", "LGPL-3", "CC0-1.0")]
MODELS = ("smollm2", "gemma3")


# -- the machine ----------------------------------------------------------------------------------------------------
def busy_jiffies() -> int:
    """Busy jiffies of all CPUs since boot (/proc/stat's first line: all but idle and iowait)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(f) - f[3] - f[4]


def others_busy(seconds: float = 0.5) -> float:
    """Cores' worth of work on the machine over ``seconds`` (this script sleeps meanwhile)."""
    b0 = busy_jiffies()
    time.sleep(seconds)
    b1 = busy_jiffies()
    return (b1 - b0) / os.sysconf("SC_CLK_TCK") / seconds


def wait_quiet(limit: float, wait: float) -> float:
    """Wait until the machine is under ``limit`` busy cores (at most ``wait`` s); the last reading."""
    end = time.time() + wait
    while True:
        load = others_busy()
        if load < limit or time.time() > end:
            return load


def stream_copy(mib: int = 256, reps: int = 7) -> dict[str, float]:
    """A STREAM-like copy on one core: best of ``reps`` copies of ``mib`` MiB (bytes read + written / s)."""
    import numpy as np

    a = np.ones(mib << 20, dtype=np.uint8)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return {"mib": mib, "copy_gb_s": 2 * a.nbytes / best / 1e9, "read_gb_s": a.nbytes / best / 1e9}


# -- models and inputs ----------------------------------------------------------------------------------------------
def model_path(name: str, work: Path) -> Path:
    from as_stored import _MODEL, model_gguf

    _MODEL[0] = name
    return model_gguf(work)


def texts(work: Path, path: Path) -> dict[str, Path]:
    """Prompt files cut at 128 / 2,048 tokens of the model's own tokenizer, and a ≥ 20,000-token text for
    llama-perplexity (it needs 2 × its context of tokens)."""
    from posenc.pretrained.tokenizer import load_tokenizer

    tok = load_tokenizer(path)
    text = "\n\n".join(p.read_text(encoding="utf-8", errors="replace") for p in TEXTS if p.is_file())
    ids = tok.encode(text)
    out = {}
    for n in (128, 2048):
        f = work / f"{path.stem}-prompt{n}.txt"
        f.write_text(tok.decode(ids[1 if ids and ids[0] == tok.bos_id else 0:][:n]), encoding="utf-8")
        out[f"prompt{n}"] = f
    f = work / "licenses.txt"
    f.write_text(text, encoding="utf-8")
    out["text"] = f
    return out


# -- one run --------------------------------------------------------------------------------------------------------
def timed(cmd: list[str], *, busy: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` under /usr/bin/time -v; its wall time, peak RSS, CPU time, output, and the others' load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0 = busy_jiffies()
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    b1 = busy_jiffies()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    others = max(0.0, ((b1 - b0) / os.sysconf("SC_CLK_TCK") - cpu) / wall)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}… failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": int(rss.group(1)) / 1024 if rss else None,
            "others_cores": others, "quiet": others < busy, "stdout": proc.stdout, "stderr": proc.stderr}


def ctx(n: int) -> str:
    return str(-(-n // 256) * 256)


def llama_speed(bin_: Path, path: Path, threads: int, fa: int) -> dict[str, Any]:
    cmd = [str(bin_ / "llama-bench"), "-m", str(path), "-t", str(threads), "-fa", str(fa), "-r", "1", "-o", "jsonl"]
    out: dict[str, Any] = {}
    for args in (["-p", "128,2048", "-n", "0"], ["-p", "0", "-n", "64", "-d", "128"]):
        run = timed(cmd + args, busy=BUSY[0])
        for line in run["stdout"].splitlines():
            row = json.loads(line)
            key = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}@d{row['n_depth']}"
            out[key] = row["avg_ts"]
        out.setdefault("others_cores", 0.0)
        out["others_cores"] = max(out["others_cores"], run["others_cores"])
        out["version"] = json.loads(run["stdout"].splitlines()[0])["build_commit"]
    out["quiet"] = out["others_cores"] < BUSY[0]
    return out


def posenc_speed(path: Path, threads: int) -> dict[str, Any]:
    run = timed([sys.executable, str(HERE / "posenc_speed.py"), str(path), "--threads", str(threads)], busy=BUSY[0],
                env=ENV)
    return {**json.loads(run["stdout"].strip().splitlines()[-1]), "others_cores": run["others_cores"],
            "quiet": run["quiet"]}


def llama_generate(bin_: Path, path: Path, threads: int, prompt: Path | str, new: int, n_prompt: int) -> dict[str, Any]:
    p = ["-f", str(prompt)] if isinstance(prompt, Path) else ["-p", prompt]
    run = timed([str(bin_ / "llama-completion"), "-m", str(path), *p, "-n", str(new), "-t", str(threads),
                 "-c", ctx(n_prompt + new + 8), "--temp", "0", "-no-cnv", "--no-display-prompt"], busy=BUSY[0])
    perf = {m.group(1).strip(): float(m.group(2)) for m in
            re.finditer(r"common_perf_print:\s+([a-z ]+?) time =\s+([\d.]+) ms", run["stderr"])}
    return {k: run[k] for k in ("wall_s", "cpu_s", "peak_rss_mib", "others_cores", "quiet")} | {
        "load_ms": perf.get("load"), "prompt_eval_ms": perf.get("prompt eval"), "eval_ms": perf.get("eval"),
        "text": run["stdout"][:400]}


def posenc_generate(path: Path, threads: int, prompt: Path | str, new: int) -> dict[str, Any]:
    text = prompt.read_text(encoding="utf-8") if isinstance(prompt, Path) else prompt
    run = timed([str(POSENC), "generate", str(path), "--prompt", text, "--max-new-tokens", str(new), "--threads",
                 str(threads), "--quiet", "--json", "-"], busy=BUSY[0], env=ENV)
    res = json.loads(run["stdout"])
    return {k: run[k] for k in ("wall_s", "cpu_s", "peak_rss_mib", "others_cores", "quiet")} | {
        "prefill_s": res.get("prefill_s"), "decode_tokens_per_s": res.get("decode_tokens_per_s"),
        "prompt_tokens": res.get("prompt_tokens"), "text": res.get("completion", "")[:400]}


def llama_score(bin_: Path, path: Path, threads: int, text: Path) -> dict[str, Any]:
    run = timed([str(bin_ / "llama-perplexity"), "-m", str(path), "-f", str(text), "-c", "8192", "--chunks", "1",
                 "-t", str(threads)], busy=BUSY[0])
    ppl = re.search(r"Final estimate: PPL = ([\d.]+)", run["stdout"] + run["stderr"])
    per_pass = re.search(r"([\d.]+) seconds per pass", run["stderr"])
    return {k: run[k] for k in ("wall_s", "cpu_s", "peak_rss_mib", "others_cores", "quiet")} | {
        "ppl": float(ppl.group(1)) if ppl else None,
        "tokens_per_s": 8192 / float(per_pass.group(1)) if per_pass else None}


def posenc_score(path: Path, threads: int, text: Path) -> dict[str, Any]:
    run = timed([str(POSENC), "perplexity", str(path), str(text), "--window", "8192", "--stride", "8192",
                 "--max-tokens", "8192", "--threads", str(threads), "--quiet", "--json", "-"], busy=BUSY[0], env=ENV)
    res = json.loads(run["stdout"])
    return {k: run[k] for k in ("wall_s", "cpu_s", "peak_rss_mib", "others_cores", "quiet")} | {
        "ppl": res.get("perplexity"), "tokens_per_s": res.get("tokens_per_s"), "seconds": res.get("seconds")}


# -- the rounds -----------------------------------------------------------------------------------------------------
BUSY = [0.3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
POSENC = Path(sys.executable).parent / "posenc"
PROGRAMS = {"speed": ("llama.cpp", "llama.cpp-fa", "posenc"), "generate": ("llama.cpp", "posenc"),
            "prefill2048": ("llama.cpp", "posenc"), "load": ("llama.cpp", "posenc"),
            "score8192": ("llama.cpp", "posenc")}


def run_one(test: str, program: str, bin_: Path, path: Path, threads: int, inputs: dict[str, Any]) -> dict[str, Any]:
    if test == "speed":
        return (posenc_speed(path, threads) if program == "posenc"
                else llama_speed(bin_, path, threads, fa=int(program.endswith("-fa"))))
    if test in ("generate", "prefill2048", "load"):
        prompt, new, n = {"generate": (inputs["prompt128"], 64, 128), "prefill2048": (inputs["prompt2048"], 1, 2048),
                          "load": ("Hello", 1, 4)}[test]
        return (posenc_generate(path, threads, prompt, new) if program == "posenc"
                else llama_generate(bin_, path, threads, prompt, new, n))
    return posenc_score(path, threads, inputs["text"]) if program == "posenc" else llama_score(bin_, path, threads,
                                                                                              inputs["text"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", type=Path, help="llama.cpp's bin folder (setup.sh prints it)")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tests", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    p.add_argument("--busy", type=float, default=0.3, help="cores of other work that discard a run (default 0.3)")
    p.add_argument("--wait", type=float, default=120.0, help="seconds to wait for a quiet machine before a run")
    p.add_argument("--work", type=Path, default=Path("/tmp/posenc-llamacpp-bench"))
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("--stream", action="store_true", help="measure the single-core copy bandwidth first")
    p.add_argument("--report", action="store_true", help="only rebuild the results from runs.jsonl")
    args = p.parse_args()
    BUSY[0] = args.busy
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.jsonl"
    if not args.report:
        if args.bin is None:
            sys.exit("--bin: llama.cpp's bin folder is needed (sh benchmarks/llamacpp/setup.sh prints it)")
        machine = {"kind": "machine", "cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version(),
                   "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load": os.getloadavg(),
                   "command": " ".join(sys.argv), "amx": amx_state() if platform.machine() == "x86_64" else None}
        if args.stream:
            wait_quiet(args.busy, args.wait)
            machine["stream"] = stream_copy()
            print(f"single-core copy: {machine['stream']['copy_gb_s']:.1f} GB/s", flush=True)
        _append(log, machine)
        torch_rss = timed([sys.executable, "-c", "import torch"], busy=10.0)["peak_rss_mib"]
        _append(log, {"kind": "torch", "import_peak_rss_mib": torch_rss})
        done = {_key(r) for r in _read(log) if r.get("kind") == "run" and r.get("kept")}
        paths = {m: model_path(m, args.work) for m in args.models}
        inputs = {m: texts(args.work, paths[m]) for m in args.models}
        for m in args.models:
            _append(log, {"kind": "bytes", "model": m, **bytes_per_token(paths[m])})
        for r in range(args.rounds):
            for m in args.models:
                for t in args.threads:
                    for test in args.tests:
                        order = PROGRAMS[test] if r % 2 == 0 else PROGRAMS[test][::-1]
                        for prog in order:
                            key = (r, m, t, test, prog)
                            if key in done:
                                continue
                            for attempt in range(3):
                                before = wait_quiet(args.busy, args.wait)
                                res = run_one(test, prog, args.bin, paths[m], t, inputs[m])
                                row = {"kind": "run", "round": r, "model": m, "threads": t, "test": test,
                                       "program": prog, "attempt": attempt, "others_before": before,
                                       "kept": bool(res["quiet"]) or attempt == 2, **res}
                                row.pop("stdout", None)
                                _append(log, row)
                                note = "" if res["quiet"] else f"  (others {res['others_cores']:.2f} cores)"
                                print(f"round {r} {m} t={t} {test:11} {prog:12} {_brief(row)}{note}", flush=True)
                                if row["kept"]:
                                    break
        _append(log, {"kind": "end", "ended": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                      "load": os.getloadavg()})
    write_report(_read(log), args.out)


def amx_state() -> dict[str, Any]:
    """What this machine offers of AMX: the CPU's flags as the kernel lists them, and whether the kernel
    supports tile data (``arch_prctl(ARCH_GET_XCOMP_SUPP)``, bit 18) — llama.cpp's AMX kernels need both."""
    import ctypes

    flags = sorted({f for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
                    for f in line.split(":", 1)[1].split() if f.startswith("amx")})
    mask = ctypes.c_ulong(0)
    try:
        rc = ctypes.CDLL(None, use_errno=True).syscall(158, 0x1021, ctypes.byref(mask))  # SYS_arch_prctl, x86_64
    except (OSError, AttributeError):
        rc = -1
    return {"cpu_flags": flags, "kernel_tile_data": bool(rc == 0 and (mask.value >> 18) & 1),
            "xcomp_supported_mask": hex(mask.value)}


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _append(log: Path, row: dict[str, Any]) -> None:
    with log.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _read(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if log.is_file() else []


def _key(r: dict[str, Any]) -> tuple:
    return (r["round"], r["model"], r["threads"], r["test"], r["program"])


def _brief(r: dict[str, Any]) -> str:
    if r["test"] == "speed":
        return "  ".join(f"{k} {v:.1f}" for k, v in r.items() if k.startswith(("pp", "tg")))
    out = f"wall {r['wall_s']:.2f} s, peak {r['peak_rss_mib']:.0f} MiB"
    return out + (f", {r['tokens_per_s'] or 0:.0f} tok/s, ppl {r['ppl']}" if r["test"] == "score8192" else "")


# -- the report -----------------------------------------------------------------------------------------------------
GOALS = {"decode": 1.3, "prefill": 2.0, "score": 2.0, "memory": 1.5, "load": 2.0}


def bytes_per_token(path: Path) -> dict[str, float]:
    """Bytes each program reads per decoded token besides the cache: llama.cpp the file's tensors (the token
    table once, as the tied head; an untied table not at all), posenc its buffers (the kernel's layout)."""
    from posenc.formats.gguf import open_mapped
    from posenc.pretrained import load_pretrained

    mapped = open_mapped(path)
    names = {t.name for t in mapped.tensors}
    tied = "output.weight" not in names
    llama = sum(t.n_bytes for t in mapped.tensors if tied or t.name != "token_embd.weight")
    model = load_pretrained(path).model
    seen, own = set(), 0
    for name, b in [*model.named_buffers(), *model.named_parameters()]:
        if b.is_meta or b.data_ptr() in seen or name.startswith("embed."):
            continue
        seen.add(b.data_ptr())
        own += b.numel() * b.element_size()
    cfg = model.config
    kv = 2 * cfg.num_layers * cfg.kv_heads * cfg.attention_head_dim  # values per cached token
    return {"llama.cpp": llama, "posenc": own, "kv_values_per_token": kv}


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _cell(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    return f"{statistics.median(xs):.2f}× ({min(xs):.2f}–{max(xs):.2f})" if len(xs) > 1 else f"{xs[0]:.2f}×"


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model and threads: medians of each program, and per-round ratios posenc ÷ llama.cpp."""
    runs = [r for r in rows if r.get("kind") == "run" and r.get("kept")]
    last = {}
    for r in runs:  # the last kept run of each key
        last[_key(r)] = r
    out: dict[str, Any] = {}
    for m in sorted({r["model"] for r in runs}):
        for t in sorted({r["threads"] for r in runs if r["model"] == m}):
            get = lambda test, prog, rnd: last.get((rnd, m, t, test, prog))  # noqa: E731
            rounds = sorted({r["round"] for r in runs if r["model"] == m and r["threads"] == t})
            ratios: dict[str, list[float]] = {}
            values: dict[str, list[float]] = {}

            def add(name: str, a: Any, b: Any, inverse: bool = False) -> None:
                if a is None or b is None or not b:
                    return
                ratios.setdefault(name, []).append(b / a if inverse else a / b)

            for rnd in rounds:
                ps, lo, lf = (get("speed", x, rnd) for x in ("posenc", "llama.cpp", "llama.cpp-fa"))
                for key in ("pp128", "pp2048", "tg64@d128"):
                    for name, peer in (("fa off", lo), ("fa on", lf)):
                        if ps and peer:
                            add(f"{key} ÷ llama.cpp ({name})", ps.get(key), peer.get(key))
                    for prog, r in (("posenc", ps), ("llama.cpp", lo), ("llama.cpp-fa", lf)):
                        if r and r.get(key):
                            values.setdefault(f"{key} tok/s {prog}", []).append(r[key])
                for test in ("generate", "prefill2048", "score8192", "load"):
                    a, b = get(test, "posenc", rnd), get(test, "llama.cpp", rnd)
                    for prog, r in (("posenc", a), ("llama.cpp", b)):
                        if r:
                            values.setdefault(f"{test} peak MiB {prog}", []).append(r["peak_rss_mib"])
                            values.setdefault(f"{test} wall s {prog}", []).append(r["wall_s"])
                            if test == "score8192":
                                values.setdefault(f"score8192 tok/s {prog}", []).append(r.get("tokens_per_s"))
                                values.setdefault(f"score8192 ppl {prog}", []).append(r.get("ppl"))
                    if a and b:
                        add(f"{test} peak RSS posenc ÷ llama.cpp", b["peak_rss_mib"], a["peak_rss_mib"], inverse=True)
                        if test == "load":
                            add("load wall posenc ÷ llama.cpp", b["wall_s"], a["wall_s"], inverse=True)
                        if test == "score8192":
                            add("score8192 tok/s ÷ llama.cpp", a.get("tokens_per_s"), b.get("tokens_per_s"))
            discarded = sum(1 for r in rows if r.get("kind") == "run" and not r.get("kept") and r["model"] == m
                            and r["threads"] == t)
            noisy = sum(1 for r in last.values() if r["model"] == m and r["threads"] == t and not r.get("quiet"))
            out[f"{m} t={t}"] = {"model": m, "threads": t, "rounds": len(rounds), "discarded": discarded,
                                 "kept_noisy": noisy,
                                 "ratios": ratios, "medians": {k: _median(v) for k, v in values.items()}}
    return out


def verdicts(s: dict[str, Any]) -> dict[str, tuple[float | None, float, bool | None]]:
    """Each goal of the issue → (the median ratio, the goal, met)."""
    r = s["ratios"]
    med = lambda k: _median(r.get(k, []))  # noqa: E731
    checks = {
        "decode ≥ 1.3× (fa off)": (med("tg64@d128 ÷ llama.cpp (fa off)"), GOALS["decode"], 1),
        "decode ≥ 1.3× (fa on)": (med("tg64@d128 ÷ llama.cpp (fa on)"), GOALS["decode"], 1),
        "prefill 128 ≥ 2× (fa on)": (med("pp128 ÷ llama.cpp (fa on)"), GOALS["prefill"], 1),
        "prefill 2,048 ≥ 2× (fa on)": (med("pp2048 ÷ llama.cpp (fa on)"), GOALS["prefill"], 1),
        "scoring 8,192 ≥ 2×": (med("score8192 tok/s ÷ llama.cpp"), GOALS["score"], 1),
        "memory 128+64 ≤ 1.5×": (med("generate peak RSS posenc ÷ llama.cpp"), GOALS["memory"], -1),
        "memory prefill 2,048 ≤ 1.5×": (med("prefill2048 peak RSS posenc ÷ llama.cpp"), GOALS["memory"], -1),
        "memory scoring 8,192 ≤ 1.5×": (med("score8192 peak RSS posenc ÷ llama.cpp"), GOALS["memory"], -1),
        "load ≤ 2×": (med("load wall posenc ÷ llama.cpp"), GOALS["load"], -1),
    }
    return {k: (v, g, None if v is None else (v >= g if d > 0 else v <= g)) for k, (v, g, d) in checks.items()}


def write_report(rows: list[dict[str, Any]], out: Path) -> None:
    summary = summarise(rows)
    machines = [r for r in rows if r.get("kind") == "machine"]
    ends = [r for r in rows if r.get("kind") == "end"]
    # one row per kind and model (each invocation records them again): the last
    extra = list({(r["kind"], r.get("model")): r for r in rows if r.get("kind") in ("bytes", "torch")}.values())
    result = {"machine": machines, "ended": ends, "extra": extra, "cells": summary,
              "verdicts": {k: {g: list(v) for g, v in verdicts(s).items()} for k, s in summary.items()}}
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    lines = ["# posenc ÷ llama.cpp, measured by `benchmarks/llamacpp/bench.py`", "",
             "Generated from `runs.jsonl` by `python benchmarks/llamacpp/bench.py --report --out "
             "benchmarks/llamacpp`; how it was run: README.md here.", ""]
    for mch in machines:
        st = mch.get("stream")
        lines.append(f"- {mch['started']}: `{mch['command']}` — {mch['cpu']}, {mch['cores']} cores, load "
                     f"{' / '.join(f'{x:.2f}' for x in mch['load'])}"
                     + (f", single-core copy {st['copy_gb_s']:.1f} GB/s" if st else "")
                     + (f"; AMX: CPU flags {mch['amx']['cpu_flags'] or 'none'}, kernel tile data "
                        f"{'yes' if mch['amx']['kernel_tile_data'] else 'no'}" if mch.get("amx") else ""))
    for e in ends:
        lines.append(f"- ended {e['ended']}, load {' / '.join(f'{x:.2f}' for x in e['load'])}")
    lines += ["", "Ratios are medians of the per-round ratios (range in brackets); > 1 means posenc is faster "
              "(speed) or bigger (memory, load time).", ""]
    lines += _overview(summary)
    for name, s in summary.items():
        noisy = (f"; {s['kept_noisy']} kept after three noisy tries (other work above the gate each time)"
                 if s.get("kept_noisy") else "")
        lines += [f"## {name} ({s['rounds']} rounds, {s['discarded']} runs discarded by the quiet gate{noisy})", "",
                  "| figure | posenc ÷ llama.cpp |", "| --- | ---: |"]
        lines += [f"| {k} | {_cell(v)} |" for k, v in s["ratios"].items()]
        lines += ["", "| goal | median | met |", "| --- | ---: | :---: |"]
        for goal, (v, _, met) in verdicts(s).items():
            lines.append(f"| {goal} | {'—' if v is None else f'{v:.2f}×'} | "
                         f"{'—' if met is None else 'yes' if met else '**no**'} |")
        lines += ["", "| median | value |", "| --- | ---: |"]
        lines += [f"| {k} | {v:,.2f} |" for k, v in s["medians"].items() if v is not None]
        lines.append("")
    lines += _limits(rows, summary)
    if extra:
        lines += ["## Recorded alongside", ""]
    for x in extra:
        if x["kind"] == "torch":
            lines.append(f"- `python -c 'import torch'` alone: peak RSS {x['import_peak_rss_mib']:.0f} MiB")
        else:
            lines.append(f"- {x['model']}: bytes read per decoded token besides the cache — llama.cpp "
                         f"{x['llama.cpp']:,}, posenc {x['posenc']:,}; cached values per token "
                         f"{x['kv_values_per_token']:,}")
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _plot(summary, out / "ratios.png")


def _overview(summary: dict[str, Any]) -> list[str]:
    """Two tables over every model and thread count: the goals (median ratio, met or not) and the whole-process
    peak memory and load time of both programs."""
    names = list(summary)
    if not names:
        return []
    head = "| | " + " | ".join(names) + " |"
    rule = "| --- | " + " | ".join("---:" for _ in names) + " |"
    table = {n: verdicts(s) for n, s in summary.items()}
    out = ["## Goals", "", head, rule]
    for goal in next(iter(table.values())):
        cells = []
        for n in names:
            v, _, met = table[n][goal]
            cells.append("—" if v is None else f"{v:.2f}× {'met' if met else '**not met**'}")
        out.append(f"| {goal} | " + " | ".join(cells) + " |")
    out += ["", "## Memory and load", "", "Medians; peak RSS of the whole process (`/usr/bin/time -v`), MiB.", "",
            head, rule]
    rows = [("128 + 64 tokens, llama.cpp", "generate peak MiB llama.cpp", "{:,.0f}"),
            ("128 + 64 tokens, posenc", "generate peak MiB posenc", "{:,.0f}"),
            ("2,048-token prefill, llama.cpp", "prefill2048 peak MiB llama.cpp", "{:,.0f}"),
            ("2,048-token prefill, posenc", "prefill2048 peak MiB posenc", "{:,.0f}"),
            ("8,192-token scoring, llama.cpp", "score8192 peak MiB llama.cpp", "{:,.0f}"),
            ("8,192-token scoring, posenc", "score8192 peak MiB posenc", "{:,.0f}"),
            ("load to the first token, llama.cpp (s)", "load wall s llama.cpp", "{:.2f}"),
            ("load to the first token, posenc (s)", "load wall s posenc", "{:.2f}"),
            ("scoring tok/s, llama.cpp", "score8192 tok/s llama.cpp", "{:,.0f}"),
            ("scoring tok/s, posenc", "score8192 tok/s posenc", "{:,.0f}"),
            ("scoring perplexity, llama.cpp (its second half)", "score8192 ppl llama.cpp", "{:.3f}"),
            ("scoring perplexity, posenc (every token)", "score8192 ppl posenc", "{:.3f}")]
    for label, key, fmt in rows:
        vals = [summary[n]["medians"].get(key) for n in names]
        if any(v is not None for v in vals):
            out.append(f"| {label} | " + " | ".join("—" if v is None else fmt.format(v) for v in vals) + " |")
    return out + [""]


def _limits(rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    """The decode limit: bytes read per token (weights + the cache at depth 160) ÷ the single-core copy rate."""
    streams = [r["stream"] for r in rows if r.get("kind") == "machine" and r.get("stream")]
    sizes = {r["model"]: r for r in rows if r.get("kind") == "bytes"}
    if not streams or not sizes:
        return []
    rate = statistics.median(s["copy_gb_s"] for s in streams) * 1e9
    out = ["## Decode against the memory-bandwidth limit", "",
           f"Bytes read per decoded token ÷ this machine's single-core copy rate ({rate / 1e9:.1f} GB/s, "
           "STREAM's convention: bytes read + written per second). Weights as each program holds them (llama.cpp: "
           "the file's tensors; posenc: its kernel layout); the KV cache at depth 160 (the middle of tg64 after 128): "
           "float16 in llama.cpp, float32 in posenc. 1 thread.", "",
           "| model | program | MB per token | limit tok/s | measured tok/s | share of the limit |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for m, b in sizes.items():
        cell = summary.get(f"{m} t=1")
        if cell is None:
            continue
        for prog, key, item in (("llama.cpp", "llama.cpp", 2), ("llama.cpp-fa", "llama.cpp", 2),
                                ("posenc", "posenc", 4)):
            per_token = b[key] + b["kv_values_per_token"] * 160 * item
            measured = cell["medians"].get(f"tg64@d128 tok/s {prog}")
            if measured is None:
                continue
            limit = rate / per_token
            out.append(f"| {m} | {prog} | {per_token / 1e6:.1f} | {limit:.0f} | {measured:.1f} | "
                       f"{measured / limit:.0%} |")
    return out + [""]


def _plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(summary.items())
    if not cells:
        return
    fig, axes = plt.subplots(1, len(cells), figsize=(4.2 * len(cells), 4.2), sharey=True, squeeze=False)
    for ax, (name, s) in zip(axes[0], cells):
        goals = verdicts(s)
        labels = [g.split(" ≥")[0].split(" ≤")[0] + (" (fa on)" if "fa on" in g else "") for g in goals]
        vals = [v if v is not None else 0 for v, _, _ in goals.values()]
        colours = ["tab:green" if met else "tab:red" if met is not None else "grey" for _, _, met in goals.values()]
        ax.barh(range(len(vals)), vals, color=colours)
        for i, (_, g, _) in enumerate(goals.values()):
            ax.plot([g, g], [i - 0.4, i + 0.4], color="black", lw=1.5)
        ax.set_yticks(range(len(vals)), labels, fontsize=8)
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("posenc ÷ llama.cpp (black: the goal)")
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
