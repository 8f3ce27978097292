"""Does every engine compute this model's positions the way it was trained? ``posenc rope --engines``.

For each layer group of a model (``audit``'s groups: the scheme and options of the loaded plan), each engine
computes its own RoPE for the model's config with its own code — rotated q for a fixed probe vector at chosen
positions, or its cos/sin — and is compared with posenc's float64 reference (``posenc.positions.build``): the
largest absolute error, the first pair and position that diverge beyond float32 rounding, and — where the
engine's numbers match a known wrong reading of the config within the same tolerance — the bug class's name.

A bug class is a *variant of the reference*: the same config read the way a published engine bug read it
(``bug_variants``: YaRN ignoring ``mscale``/``mscale_all_dim``, dropping an explicit ``attention_factor``, the
attention factor collapsed to 1, Gemma 3's scaling on the wrong layer type, a misread Llama 3 scaling,
LongRoPE's switch at the wrong boundary, the other pairing, dynamic NTK counting positions twice, a scaling
block that was never read, a transformers-5 ``rope_parameters`` read by ``rope_scaling`` code). An engine whose
output equals a variant is named by it.

Engines (``ENGINES``): ``hf`` in process (the model's own ``*RotaryEmbedding`` fed the config and its
``apply_rotary_pos_emb``), and ``torchtune``, ``x-transformers``, ``rotary-embedding-torch``, ``mlx`` in their own
venvs under ``.engines/`` (``posenc engines install NAME``), run as ``python -m posenc.ropecheck.engine_adapters NAME``
with the cases on stdin; ``llama.cpp`` on a GGUF file, through its own programs (``posenc.ropecheck.llamacpp``:
its loader's reading of the file, ggml's RoPE kernel); ``vllm`` is reported unavailable with the reason
(``posenc.ropecheck.install``). An engine that does not implement a variant says so, with the reason.
"""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from posenc.positions import build

#: Status words of the JSON (per engine and layer group).
STATUSES = ("agrees", "differs", "unsupported", "unavailable")
#: Exit status of ``posenc rope --engines`` when an available engine differs (2 stays the usage error).
EXIT_DIFFERS = 3


@dataclass
class Case:
    """One layer group of one model, as every engine is asked for it."""

    layer_type: str
    scheme: str
    options: dict[str, Any]
    head_dim: int
    positions: list[int]
    config: dict[str, Any] = field(default_factory=dict)  # the HF config dict engines read themselves
    pairing: str = "half"  # the convention the model's q/k weights are in (HF checkpoints: half)
    siblings: list[dict[str, Any]] = field(default_factory=list)  # the other groups' {layer_type, scheme, options}
    layer_index: int = 0  # the group's first layer (engines that build a layer's attention ask for one)
    layers: list[int] = field(default_factory=list)  # every layer of the group
    source: str | None = None  # the model file or config the case was read from (llama.cpp reads a .gguf itself)

    def to_json(self) -> dict[str, Any]:
        return {"layer_type": self.layer_type, "scheme": self.scheme, "options": self.options,
                "head_dim": self.head_dim, "positions": self.positions, "config": self.config,
                "pairing": self.pairing, "siblings": self.siblings, "layer_index": self.layer_index,
                "layers": self.layers, "source": self.source}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Case":
        return cls(**data)

    @property
    def rotary_dim(self) -> int:
        return int(self.options.get("rotary_dim") or self.head_dim)


def probe(head_dim: int) -> torch.Tensor:
    """The fixed vector every engine rotates (float64, (head_dim,)); values in [−1, 1], none near 0."""
    g = torch.Generator().manual_seed(66)
    x = torch.rand(head_dim, generator=g, dtype=torch.float64) * 2 - 1
    return torch.where(x.abs() < 0.1, torch.sign(x) * 0.5 + x, x)


# -- the reference and its wrong readings ----------------------------------------------------------------------------
def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str) -> torch.Tensor:
    """x (D,) rotated at each row of cos/sin (T, P): (T, D), float64; coordinates past 2P pass through."""
    rot = 2 * cos.shape[-1]
    xs = x.double().expand(cos.shape[0], -1)
    xr = xs[:, :rot]
    if pairing == "half":
        x1, x2 = xr[:, : rot // 2], xr[:, rot // 2:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = xr[:, 0::2], xr[:, 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return torch.cat((out, xs[:, rot:]), dim=-1)


def from_angles(angles: torch.Tensor, factor: float, x: torch.Tensor, pairing: str) -> dict[str, torch.Tensor]:
    cos, sin = angles.cos() * factor, angles.sin() * factor
    return {"cos": cos, "sin": sin, "angles": angles, "rotated": rotate(x, cos, sin, pairing), "pairing": pairing}


def _scheme(name: str, options: dict[str, Any], head_dim: int) -> Any:
    return build(name, dim=head_dim, num_heads=1, **{k: v for k, v in options.items() if v is not None})


def reference(case: Case, pairing: str | None = None, *, scheme: str | None = None,
              options: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """posenc's float64 RoPE of the case (or of another scheme/options): angles, cos/sin (T, P), rotated (T, D)."""
    s = _scheme(scheme or case.scheme, case.options if options is None else options, case.head_dim)
    positions = torch.tensor(case.positions, dtype=torch.int64)
    return from_angles(s.angles(positions), float(s.attention_factor), probe(case.head_dim), pairing or case.pairing)


def _per_position(case: Case, theta_at: Callable[[int], torch.Tensor], factor: float,
                  pairing: str | None = None) -> dict[str, torch.Tensor]:
    angles = torch.stack([p * theta_at(p) for p in case.positions])
    return from_angles(angles, factor, probe(case.head_dim), pairing or case.pairing)


def _differs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool((a["rotated"] - b["rotated"]).abs().max() > 1e-9)


def bug_variants(case: Case) -> list[tuple[str, str, dict[str, torch.Tensor]]]:
    """(bug class, what the engine did, the case's numbers read that way) — only the variants that differ from
    the reference for this case (a variant equal to the truth names nothing)."""
    ref = reference(case)
    o, name, out = dict(case.options), case.scheme, []
    base = float(o.get("base", 10000.0))
    plain = {"base": base, **({"rotary_dim": o["rotary_dim"]} if o.get("rotary_dim") else {})}

    def add(bug: str, why: str, numbers: dict[str, torch.Tensor]) -> None:
        if _differs(numbers, ref):
            out.append((bug, why, numbers))

    other = "interleaved" if case.pairing == "half" else "half"
    add("pairing", f"rotates {other} pairs where the weights are in {case.pairing} pairing (a fused kernel's "
        "convention, or q/k rows not permuted on conversion)", reference(case, other))
    if name == "rope-yarn":
        if o.get("mscale") is not None or o.get("mscale_all_dim") is not None:
            add("yarn-ignores-mscale", "YaRN attention factor from 0.1·ln(factor) + 1, ignoring mscale/"
                "mscale_all_dim (vLLM's generic YaRN)", reference(case, options={**o, "mscale": None,
                                                                                "mscale_all_dim": None}))
        if o.get("attention_factor") is not None:
            add("yarn-drops-attention-factor", "the config's explicit attention_factor dropped for the default "
                "formula (vLLM, mlx-lm)", reference(case, options={**o, "attention_factor": None}))
    factor = float(_scheme(name, o, case.head_dim).attention_factor)
    if factor != 1.0:
        one = {k: v / factor if k in ("cos", "sin", "rotated") else v for k, v in ref.items()}
        add("attention-factor-one", f"attention factor collapsed to 1 instead of {factor:.6g} (exllamav3 with "
            "mscale == mscale_all_dim == 1 filled in)", one)
    if name != "rope":
        why = ("the scaling block never read: plain RoPE at the config's base (YaRN keys missing from a converted "
               "GGUF, a reader of another key)")
        bug = "scaling-dropped"
        cfg = case.config
        if isinstance(cfg.get("rope_parameters"), dict) and "rope_scaling" not in cfg:
            bug, why = "rope_scaling-reader", ("a transformers-5 config's rope_parameters read by code written for "
                                               "rope_scaling: the scaling never seen, plain RoPE")
        if case.siblings:
            bug, why = "scaling-on-wrong-layers", (f"{case.layer_type} layers run unscaled although the config "
                                                   f"scales them (a port that scales the wrong layer type)")
        add(bug, why, reference(case, scheme="rope", options=plain))
        if isinstance(case.config.get("rope_parameters"), dict) and "rope_scaling" not in case.config \
                and "rope_theta" not in case.config and base != 10000.0:
            add("rope_scaling-reader", "a transformers-5 config read by rope_scaling code: neither the scaling nor "
                "rope_theta (inside rope_parameters) seen — plain RoPE at 10000",
                reference(case, scheme="rope", options={**plain, "base": 10000.0}))
    elif base != 10000.0:
        add("theta-default", "rope_theta not read: the default base 10000",
            reference(case, scheme="rope", options={**plain, "base": 10000.0}))
    for sib in case.siblings:  # Gemma 3: a scaling that belongs to another layer type applied here
        if name == "rope" and sib["scheme"] != "rope":
            opts = {**sib["options"], "base": base}
            if o.get("rotary_dim"):
                opts["rotary_dim"] = o["rotary_dim"]
            try:
                add("scaling-on-wrong-layers", f"the {sib['layer_type']} layers' {sib['scheme']} scaling applied "
                    f"to the {case.layer_type} layers too (a port that scales every layer)",
                    reference(case, scheme=sib["scheme"], options=opts))
            except (TypeError, ValueError):
                pass
    if name == "rope-llama3":
        add("llama3-scaling-misread", "the factor applied to every pair (read as linear scaling)",
            reference(case, scheme="rope-linear", options={**plain, "factor": o.get("factor", 8.0)}))
        mpe = case.config.get("max_position_embeddings")
        if isinstance(mpe, int) and mpe != o.get("original_max_len"):
            add("llama3-scaling-misread", f"original_max_position_embeddings read as max_position_embeddings "
                f"({mpe})", reference(case, options={**o, "original_max_len": mpe}))
    if name == "rope-longrope" and o.get("max_seq_len") is None:
        s = _scheme(name, o, case.head_dim)
        short, long = s.inv_freq_at(s.original_max_len), s.inv_freq_at(s.original_max_len + 1)
        L = s.original_max_len
        f = float(s.attention_factor)
        for why, switch in ((f"long factors from position {L + 1} (p > L₀, one late)", lambda p: p > L),
                            (f"long factors from position {L - 1} (p + 1 ≥ L₀, one early)", lambda p: p + 1 >= L),
                            ("long factors at every position (switched on the context length, not the position)",
                             lambda p: True),
                            ("short factors at every position (never switches)", lambda p: False)):
            add("longrope-switch-boundary", why, _per_position(case, lambda p, sw=switch: long if sw(p) else short, f))
        mpe = case.config.get("max_position_embeddings")
        if isinstance(mpe, int) and mpe > L:
            add("longrope-switch-boundary", f"switch at max_position_embeddings = {mpe} instead of L₀ = {L}",
                _per_position(case, lambda p: long if p >= mpe else short, f))
    if name == "rope-dynamic-ntk" and o.get("max_seq_len") is None:
        s = _scheme(name, o, case.head_dim)
        add("dynamic-ntk-positions-twice", "the length for the NTK base counted twice (2·(p + 1): cached and new "
            "tokens both added)", _per_position(case, lambda p: s.inv_freq_at(2 * (p + 1)), float(s.attention_factor)))
    return out


# -- comparing ------------------------------------------------------------------------------------------------------
def _coordinates(per_pair: torch.Tensor, pairing: str, width: int, fill: float = 0.0) -> torch.Tensor:
    """(T, P) per pair → (T, D) per coordinate in ``pairing``'s layout (coordinates past 2P get ``fill``)."""
    T, P = per_pair.shape
    a = torch.cat((per_pair, per_pair), -1) if pairing == "half" else per_pair.repeat_interleave(2, -1)
    return torch.cat((a, torch.full((T, width - 2 * P), fill, dtype=a.dtype)), -1)


def _pairs(per_coordinate: torch.Tensor, pairing: str, P: int) -> torch.Tensor:
    """(T, D) → (T, P): the larger of each pair's two coordinates in ``pairing``'s layout."""
    d = per_coordinate
    if pairing == "half":
        return torch.maximum(d[:, :P], d[:, P:2 * P])
    return torch.maximum(d[:, 0:2 * P:2], d[:, 1:2 * P:2])


def excess(got: dict[str, torch.Tensor], numbers: dict[str, Any], x_scale: float,
           ulps: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
    """(error / tolerance per rotated coordinate (T, D) or per pair (T, P), the largest absolute error).

    The tolerance is what float32 arithmetic may be off by: the angles p·θ rounded to float32 (16 units in the
    last place, or ``ulps`` per pair (P,) for an engine that forms θᵢ by i successive float32 products, as
    ggml does), times the attention factor and the probe's size; laid out in the pairing ``numbers`` were
    rotated in.
    """
    factor = max(float(numbers["cos"].abs().max()), float(numbers["sin"].abs().max()), 1.0)
    width = 16.0 if ulps is None else ulps.double()[: numbers["angles"].shape[-1]]
    tol = factor * x_scale * (2e-6 + width * 2.0**-24 * numbers["angles"].abs())  # (T, P)
    if got.get("rotated") is not None:
        err = torch.nan_to_num((got["rotated"].double() - numbers["rotated"]).abs(), nan=math.inf)
        width = numbers["rotated"].shape[-1]
        return err / _coordinates(tol, numbers["pairing"], width, fill=factor * x_scale * 2e-6), float(err.max())
    err = torch.nan_to_num(torch.maximum((got["cos"].double() - numbers["cos"]).abs(),
                                         (got["sin"].double() - numbers["sin"]).abs()), nan=math.inf)
    return err / tol, float(err.max())


def judge(case: Case, engine: dict[str, Any], engine_pairing: str | None = None) -> dict[str, Any]:
    """One engine's numbers for one case against the reference: status, max error, first diverging, bug class."""
    pairing = engine_pairing or case.pairing
    c = Case(**{**case.__dict__, "pairing": pairing})
    ref = reference(c)
    got = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in engine.items()
           if k in ("rotated", "cos", "sin") and v is not None}
    if "rotated" not in got and "cos" not in got:
        return {"status": "unsupported", "max_abs_err": None, "first_diverging": None, "bug_class": None,
                "reason": "the engine returned neither rotated q nor cos/sin"}
    x_scale = float(probe(case.head_dim).abs().max())
    ulps = None if engine.get("angle_ulps") is None else torch.as_tensor(engine["angle_ulps"], dtype=torch.float64)
    ratio, worst = excess(got, ref, x_scale, ulps)
    P = ref["cos"].shape[-1]
    per_pair = _pairs(ratio, pairing, P) if "rotated" in got else ratio
    bad = per_pair > 1
    out: dict[str, Any] = {"max_abs_err": worst, "first_diverging": None, "bug_class": None}
    if not bool((ratio > 1).any()):
        out["status"] = "agrees"
        return out
    out["status"] = "differs"
    if bool(bad.any()):
        t, i = (int(v) for v in bad.nonzero()[0])  # row-major: the earliest position, then the lowest pair
        out["first_diverging"] = {"pair": i, "position": case.positions[t]}
    else:  # only coordinates past the rotated ones differ
        t, j = (int(v) for v in (ratio > 1).nonzero()[0])
        out["first_diverging"] = {"pair": None, "coordinate": j, "position": case.positions[t]}
    matches = []
    for bug, why, numbers in bug_variants(c):
        if not bool((excess(got, numbers, x_scale, ulps)[0] <= 1).all()):
            continue
        matches.append({"bug_class": bug, "why": why})
    if matches:
        out["bug_class"] = matches[0]["bug_class"]
        out["reason"] = matches[0]["why"]
        if len(matches) > 1:
            out["also_matches"] = matches[1:]
    else:
        out["reason"] = "matches no known bug class"
    return out


# -- engines ----------------------------------------------------------------------------------------------------------
class Unsupported(Exception):
    """The engine does not implement this variant (the message says what it lacks)."""


class Engine:
    """An engine: ``compute(case)`` → {"rotated": (T, D)} and/or {"cos", "sin": (T, P)}, factor included.

    ``pairing`` is the convention the engine's weights are in after its own conversion (torchtune permutes HF's
    q/k rows to interleaved on load): the reference is formed in it. ``available()`` → None or why not.
    """

    name = "?"
    pairing = "half"

    def available(self) -> str | None:
        return None

    def version(self) -> str | None:
        return None

    def compute(self, case: Case) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def model_rows(self, cases: list[Case], *, logits_tokens: int, progress: Any = None) -> list[dict[str, Any]]:
        """Rows about the whole model rather than one layer group (llama.cpp's logits); none by default."""
        return []

    def run(self, cases: list[Case]) -> list[dict[str, Any]]:
        """One result per case: the computed numbers, or {"unsupported": why}."""
        out = []
        for case in cases:
            try:
                out.append({**self.compute(case), "pairing": self.pairing})
            except Unsupported as err:
                out.append({"unsupported": str(err)})
        return out


class HFEngine(Engine):
    """transformers in process: the model's own ``*RotaryEmbedding`` fed the config, one position per call (as
    a decoding engine asks), and its module's ``apply_rotary_pos_emb`` on the probe."""

    name = "hf"

    def available(self) -> str | None:
        try:
            import transformers  # noqa: F401
        except ImportError:
            return "transformers is not installed in posenc's environment"
        return None

    def version(self) -> str | None:
        import transformers

        return transformers.__version__

    def compute(self, case: Case) -> dict[str, Any]:
        import importlib
        from posenc.ropecheck import hf

        cfg = hf.config_of_dict(case.config)
        if cfg is None:
            raise Unsupported(f"transformers does not know model_type {case.config.get('model_type')!r}")
        cls = hf._rotary_class(cfg)
        if cls is None:
            raise Unsupported(f"no rotary-embedding module for {type(cfg).__name__}")
        try:
            module = cls(cfg)
        except Exception as err:  # noqa: BLE001 - a module that wants more than the config
            raise Unsupported(f"{cls.__name__}(config) failed: {type(err).__name__}: {err}") from err
        if not hasattr(module, "inv_freq") and not any(k.endswith("_inv_freq") for k in vars(module).get(
                "_buffers", {})):
            raise Unsupported(f"{cls.__name__} holds no inv_freq (a sin/cos table: not fed positions)")
        kwargs = {"layer_type": case.layer_type}  # Gemma 3's module takes the layer type; others take none
        try:
            module(torch.zeros(1, 1, case.head_dim), torch.zeros(1, 1, dtype=torch.int64), **kwargs)
        except TypeError:
            kwargs = {}
        P = case.rotary_dim // 2
        x = probe(case.head_dim)
        cos_rows, sin_rows = [], []
        for p in case.positions:
            ids = torch.tensor([[p]], dtype=torch.int64)
            cos, sin = module(torch.zeros(1, 1, case.head_dim, dtype=torch.float32), ids, **kwargs)
            cos_rows.append(cos.reshape(-1)[:P].double())
            sin_rows.append(sin.reshape(-1)[:P].double())
        cos, sin = torch.stack(cos_rows), torch.stack(sin_rows)
        out: dict[str, Any] = {"cos": cos, "sin": sin}
        modeling = importlib.import_module(cls.__module__)
        apply = getattr(modeling, "apply_rotary_pos_emb", None)
        if apply is not None and case.rotary_dim == case.head_dim:
            full_cos, full_sin = torch.cat((cos, cos), -1).float(), torch.cat((sin, sin), -1).float()
            q = x.float().expand(len(case.positions), -1)[None, None]  # (1, 1, T, D)
            try:
                rq, _ = apply(q, q, full_cos[None], full_sin[None])
                out["rotated"] = rq[0, 0].double()
            except Exception:  # noqa: BLE001 - a model whose apply takes other arguments: cos/sin alone
                pass
        return out


class SubprocessEngine(Engine):
    """An engine in its own venv (``.engines/NAME``): the cases go to ``python -m
    posenc.ropecheck.engine_adapters NAME`` on stdin, the numbers come back as JSON."""

    def __init__(self, name: str, pairing: str) -> None:
        self.name, self.pairing = name, pairing
        self._version: str | None = None

    def available(self) -> str | None:
        from posenc.ropecheck import install

        if self.name in install.UNAVAILABLE:
            return install.UNAVAILABLE[self.name]
        record = install.record_of(self.name)
        if record is None or not install.python_of(self.name).exists():
            return f"not installed: `posenc engines install {self.name}`"
        if record.get("status") != "installed":
            return f"installing failed: {record.get('reason')}"
        versions = record.get("versions") or {}
        self._version = ", ".join(f"{k} {v}" for k, v in versions.items())
        return None

    def version(self) -> str | None:
        return self._version

    def run(self, cases: list[Case]) -> list[dict[str, Any]]:
        from posenc.ropecheck import install

        done = subprocess.run([str(install.python_of(self.name)), "-m", "posenc.ropecheck.engine_adapters", self.name],
                              input=json.dumps([c.to_json() for c in cases]), capture_output=True, text=True,
                              timeout=600)
        if done.returncode:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            return [{"unavailable": f"the engine's process failed: {tail}"} for _ in cases]
        return json.loads(done.stdout)


class LlamaCppEngine(Engine):
    """llama.cpp on a GGUF file: its loader's reading of the file and ggml's RoPE kernel on the probe
    (``posenc.ropecheck.llamacpp``), and its next-token distributions against posenc's under each reading of
    the file's positions (``posenc.ropecheck.llamacpp_logits``: the check that follows YaRN too); a case read
    from a config.json or HF folder is unsupported."""

    name = "llama.cpp"

    def __init__(self) -> None:
        self._version: str | None = None
        self._bins: tuple[Any, Any] | None = None
        self._build: Any = None

    def available(self) -> str | None:
        import os
        from pathlib import Path

        from posenc.ropecheck import install, llamacpp

        record = install.record_of("llama.cpp") or {}
        build = None  # POSENC_LLAMACPP_BUILD, else the folder `posenc engines install llama.cpp` built
        if os.environ.get("POSENC_LLAMACPP_BUILD"):
            build = Path(os.environ["POSENC_LLAMACPP_BUILD"])
        elif record.get("status") == "installed" and record.get("build"):
            build = Path(record["build"])
        if build is None and record.get("status") == "failed":
            return f"installing failed: {record.get('reason')}"
        if build is None:
            return ("not installed: `posenc engines install llama.cpp` (builds it from PyPI's llama-cpp-python "
                    "sdist, about five minutes), or set POSENC_LLAMACPP_BUILD to a llama.cpp build folder")
        try:
            self._bins = llamacpp.binaries(build)
            self._version = llamacpp.version(build)
            self._build = build
        except (llamacpp.Unavailable, OSError, subprocess.SubprocessError) as err:
            return str(err)
        return None

    def version(self) -> str | None:
        return self._version

    def run(self, cases: list[Case]) -> list[dict[str, Any]]:
        from posenc.ropecheck import llamacpp

        assert self._bins is not None, "available() first"
        completion, rope = self._bins
        read: dict[str, Any] = {}
        out: list[dict[str, Any]] = []
        for case in cases:
            if not case.source or not _is_gguf(case.source):
                out.append({"unsupported": "llama.cpp reads GGUF files: give posenc rope the model's .gguf"})
                continue
            try:
                if case.source not in read:
                    read[case.source] = llamacpp.read_gguf(completion, case.source)
                info = read[case.source]
                scaling = str(info.get("rope scaling", "none"))
                if scaling not in ("none", "linear"):
                    out.append({"unsupported": f"rope scaling {scaling}: llama.cpp computes its attention factor "
                                               "inside its context without printing it (llama-context.cpp), so "
                                               "its RoPE is compared through its logits (the logits row)"})
                    continue
                layers = case.layers or [case.layer_index]
                params = llamacpp.layer_parameters(info, layers[0])
                if params["mode"] not in llamacpp.PAIRING:
                    out.append({"unsupported": f"llama.cpp's rope type {params['mode']} (M-RoPE or vision): "
                                               "posenc's probe covers NORM (0) and NEOX (2)"})
                    continue
                rotated = llamacpp.rotate(rope, params, probe(case.head_dim).tolist(), case.positions)
            except llamacpp.Unavailable as err:
                out.append({"unavailable": str(err)})
                continue
            # ggml forms θᵢ = p·sⁱ by i successive float32 products (theta *= theta_scale): pair i carries up to
            # i + 1 roundings more than one product would
            result: dict[str, Any] = {"rotated": torch.tensor(rotated, dtype=torch.float64),
                                      "pairing": llamacpp.PAIRING[params["mode"]],
                                      "angle_ulps": [16.0 + 2 * (i + 1) for i in range(params["n_rot"] // 2)]}
            unlike = [i for i in layers if bool(info["is_swa"].get(i, False)) != params["sliding"]]
            kind = "sliding" if params["sliding"] else "global"
            result["note"] = (f"llama.cpp reads layer {layers[0]} as {kind} (θ {params['freq_base']:g}, "
                              f"scale {params['freq_scale']:g}, {params['n_rot']} rotated dims, rope type "
                              f"{params['mode']}: {llamacpp.PAIRING[params['mode']]} pairs)"
                              + (f"; layers {unlike} of this group it reads otherwise" if unlike else ""))
            out.append(result)
        return out


    def model_rows(self, cases: list[Case], *, logits_tokens: int, progress: Any = None) -> list[dict[str, Any]]:
        """The logits row: llama-perplexity's next-token distributions on the file against posenc's under
        each reading of its positions (``posenc.ropecheck.llamacpp_logits``); none when ``logits_tokens`` is 0
        or the model is not a GGUF file."""
        from posenc.ropecheck import llamacpp, llamacpp_logits

        source = next((c.source for c in cases if c.source), None)
        if not logits_tokens or source is None or not _is_gguf(source):
            return []
        row: dict[str, Any] = {"engine": self.name, "version": self._version, "layer_type": "logits",
                               "scheme": "whole model", "status": None, "max_abs_err": None,
                               "first_diverging": None, "bug_class": None, "reason": None}
        try:
            program = llamacpp.perplexity_binary(self._build)
            return [row | llamacpp_logits.check(program, source, tokens=logits_tokens,
                                                threads=torch.get_num_threads(), say=progress)]
        except llamacpp.Unavailable as err:  # no llama-perplexity, no text, or it failed (the message says)
            return [row | {"status": "unavailable", "reason": str(err)}]


def _is_gguf(source: str) -> bool:
    try:
        with open(source, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


#: Engine names in the order ``--engines all`` runs them.
ENGINE_NAMES = ("hf", "torchtune", "x-transformers", "rotary-embedding-torch", "mlx", "llama.cpp", "vllm")
#: Each engine's own pairing (what its q/k weights are converted to).
ENGINE_PAIRING = {"hf": "half", "torchtune": "interleaved", "x-transformers": "interleaved",
                  "rotary-embedding-torch": "interleaved", "mlx": "half", "llama.cpp": "half", "vllm": "half"}
#: Extra engines by name (the tests' shims register here); they run in process.
EXTRA: dict[str, Engine] = {}


def engine(name: str) -> Engine:
    if name in EXTRA:
        return EXTRA[name]
    if name == "hf":
        return HFEngine()
    if name == "llama.cpp":
        return LlamaCppEngine()
    if name in ENGINE_NAMES:
        return SubprocessEngine(name, ENGINE_PAIRING[name])
    raise ValueError(f"--engines: unknown engine {name!r}; choose from {', '.join(ENGINE_NAMES + tuple(EXTRA))} "
                     "or all")


def parse_engines(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--engines needs a comma list of engines or all")
    out: list[str] = []
    for n in names:
        for m in (ENGINE_NAMES if n == "all" else (n,)):
            engine(m)  # refuses an unknown name
            if m not in out:
                out.append(m)
    return out


def default_positions(case_options: dict[str, Any], original: int) -> list[int]:
    """Positions every engine is asked at: the first few, both sides of L₀ (LongRoPE's and dynamic NTK's
    switches), and past it."""
    L = int(original)
    return sorted({0, 1, 2, 7, 100, max(L - 1, 0), L, L + 1, 2 * L, 4 * L - 1})


def cases_of(report: dict[str, Any], config: dict[str, Any], positions: list[int] | None = None) -> list[Case]:
    """One case per rotary layer group of an audit report (``posenc.ropecheck.audit.audit``)."""
    groups = [e for e in report["layer_types"] if e.get("scheme") not in (None, "none")]
    out = []
    for e in groups:
        siblings = [{"layer_type": s["layer_type"], "scheme": s["scheme"], "options": s["options"]}
                    for s in groups if s is not e]
        opts = {k: v for k, v in e["options"].items() if k != "pairing"}
        out.append(Case(layer_type=e["layer_type"], scheme=e["scheme"], options=opts, head_dim=e["head_dim"],
                        positions=positions or default_positions(opts, e["original_max_len"]),
                        config=config, pairing=e["options"].get("pairing", "half"), siblings=siblings,
                        layer_index=(e.get("layer_indices") or [0])[0], layers=list(e.get("layer_indices") or []),
                        source=report.get("source")))
    return out


def compare(cases: list[Case], names: list[str], progress: Any = None, *, logits_tokens: int = 0
            ) -> list[dict[str, Any]]:
    """Per engine and case: the JSON rows of ``posenc rope --engines``; then the engine's rows about the whole
    model (llama.cpp's logits on ``logits_tokens`` tokens; 0: none)."""
    rows = []
    for name in names:
        eng = engine(name)
        why = eng.available()
        if why is None and progress is not None:
            progress(f"engine {name}: computing {len(cases)} layer group(s)")
        results = eng.run(cases) if why is None else [{"unavailable": why}] * len(cases)
        for case, result in zip(cases, results):
            row: dict[str, Any] = {"engine": name, "version": eng.version(), "layer_type": case.layer_type,
                                   "scheme": case.scheme, "status": None, "max_abs_err": None,
                                   "first_diverging": None, "bug_class": None, "reason": None}
            if "unavailable" in result:
                row |= {"status": "unavailable", "reason": result["unavailable"]}
            elif "unsupported" in result:
                row |= {"status": "unsupported", "reason": result["unsupported"]}
            else:
                row |= judge(case, result, result.get("pairing"))
                if (result.get("pairing") and result["pairing"] != case.pairing and row["status"] == "agrees"
                        and not result.get("note")):
                    row["reason"] = (f"compared in the engine's own {result['pairing']} pairing (it permutes "
                                     f"{case.pairing}-pairing q/k rows on load)")
                if result.get("note"):
                    row["reason"] = "; ".join(r for r in (result["note"], row["reason"]) if r)
            rows.append(row)
        if why is None:
            rows += eng.model_rows(cases, logits_tokens=logits_tokens, progress=progress)
    return rows


def exit_status(rows: list[dict[str, Any]]) -> int:
    return EXIT_DIFFERS if any(r["status"] == "differs" for r in rows) else 0
