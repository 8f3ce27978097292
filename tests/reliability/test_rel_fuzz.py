"""Property-based fuzzing of the public API and the CLI (Hypothesis).

Every property asserts the same promise: a call ends in a correct result or in
a ``ValueError``/``TypeError`` (the CLI: exit 2 or 1 with one ``error:`` line)
— never another exception, never a non-finite output from finite inputs, never
a hang (each example has a deadline, see conftest.py's profiles).

Run longer with ``HYPOTHESIS_PROFILE=long`` (docs/reliability.md records such a run).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import assume, event, given, note, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from posenc import ModelConfig, build_decoder_only
from posenc import checkpoint as ckpt
from posenc.attention import MultiHeadAttention
from posenc.inspect import inspect_checkpoint, load_checkpoint
from posenc.positions import build, lookup, names
from posenc.validation import dumps

from conftest import posenc

@pytest.fixture(autouse=True)
def small_memory_budget(monkeypatch):
    """1 GiB: a fuzzed size (a 2³¹-row table) must be refused by the budget, not allocated."""
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(1 << 30))


ACCEPTED = (ValueError, TypeError)  # CheckpointError is a ValueError; FileNotFoundError is caught where files vanish

# -- values ------------------------------------------------------------------------------------------
EDGE_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 1.0, 1e-300, 1e300, 2.0**64, 0.5])
FLOATS = st.one_of(EDGE_FLOATS, st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(min_value=-1e4, max_value=1e4))
INTS = st.one_of(st.sampled_from([0, -1, 1, 2, 3, 2**31, 2**63, -(2**63)]), st.integers(-64, 4096))
ANY_VALUE = st.one_of(FLOATS, INTS, st.none(), st.booleans(), st.sampled_from(["half", "interleaved", "", "x"]),
                      st.lists(FLOATS, max_size=5))


def _options(name: str) -> list[str]:
    context = {"dim", "num_heads", "head_dim"}
    return [p for p in inspect.signature(lookup(name).__init__).parameters if p not in ("self", *context)]


@st.composite
def scheme_and_options(draw):
    name = draw(st.sampled_from(names()))
    chosen = draw(st.lists(st.sampled_from(_options(name) or ["_none"]), max_size=3, unique=True))
    opts = {k: draw(ANY_VALUE) for k in chosen if k != "_none"}
    return name, opts


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())


# -- schemes: any option value ------------------------------------------------------------------------
@given(spec=scheme_and_options(), heads=st.sampled_from([1, 2, 4]), length=st.integers(1, 12))
def test_any_scheme_with_any_options_builds_and_attends_finitely_or_refuses(spec, heads, length):
    name, opts = spec
    note(f"{name} {opts}")
    try:
        scheme = build(name, dim=16, num_heads=heads, **opts)
    except ACCEPTED as err:
        event(f"refused: {type(err).__name__}")
        return
    attn = MultiHeadAttention(dim=16, num_heads=heads, position=scheme)
    x = torch.randn(2, length, 16)
    try:
        out, _ = attn(x, q_pos=torch.arange(length), causal=True)
    except ACCEPTED as err:
        event(f"refused: {type(err).__name__}")
        return
    event("result: finite attention output")
    assert out.shape == (2, length, 16)
    assert _finite(out), f"{name} {opts} built, but attention returned non-finite values"


# -- models: shapes, dtypes, positions, caches ---------------------------------------------------------
_MODELS: dict[str, torch.nn.Module] = {}


def _model(position: str) -> torch.nn.Module:
    if position not in _MODELS:
        torch.manual_seed(0)
        opts = {"max_len": 16} if position == "learned" else {}
        _MODELS[position] = build_decoder_only(ModelConfig(vocab_size=7, dim=16, num_heads=2, num_layers=2,
                                                           position=position, position_options=opts)).eval()
    return _MODELS[position]


DTYPES = st.sampled_from([torch.long, torch.int32, torch.int16, torch.uint8, torch.float32, torch.bool])


@st.composite
def tensors(draw, max_dims: int = 3, low: int = -3, high: int = 20):
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=max_dims)))
    dtype = draw(DTYPES)
    values = torch.randint(low, high, shape) if shape else torch.tensor(draw(st.integers(low, high)))
    return values.to(dtype)


@given(position=st.sampled_from(["rope", "alibi", "sinusoidal", "learned", "t5", "none"]), ids=tensors(),
       positions=st.one_of(st.none(), tensors(max_dims=2, high=40)), cache_layers=st.sampled_from([None, 0, 1, 2, 3]),
       as_list=st.booleans())
def test_model_forward_gives_logits_or_refuses(position, ids, positions, cache_layers, as_list):
    model = _model(position)
    cache = None if cache_layers is None else [*model.new_cache(), *model.new_cache()][:cache_layers]
    arg = ids.tolist() if as_list else ids
    try:
        with torch.no_grad():
            logits = model(arg, positions=positions, cache=cache)
    except ACCEPTED as err:
        event(f"refused: {type(err).__name__}")
        return
    event("result: logits")
    assert logits.shape == (*ids.shape, 7) and _finite(logits)


@given(position=st.sampled_from(["rope", "alibi", "sinusoidal"]), prompt=tensors(high=7),
       new=st.integers(-2, 4))
def test_generate_continues_or_refuses(position, prompt, new):
    model = _model(position)
    try:
        out = model.generate(prompt, max_new_tokens=new)
    except ACCEPTED as err:
        event(f"refused: {type(err).__name__}")
        return
    event("result: continuation")
    assert out.shape == (prompt.shape[0], prompt.shape[1] + new) and bool((out[:, : prompt.shape[1]] == prompt).all())


@given(dim=st.sampled_from([8, 16]), heads=st.sampled_from([1, 2, 3, 4]), q=tensors(max_dims=4, high=3),
       context_len=st.one_of(st.none(), st.integers(0, 4)), causal=st.booleans(),
       mask=st.one_of(st.none(), tensors(max_dims=2, low=0, high=2)))
def test_attention_takes_any_input_or_refuses(dim, heads, q, context_len, causal, mask):
    try:
        attn = MultiHeadAttention(dim=dim, num_heads=heads)
    except ACCEPTED as err:
        event(f"refused: {type(err).__name__}")
        return
    x = q.float() if q.dim() == 3 and q.shape[-1] == dim else q.float()
    context = None if context_len is None else torch.randn(x.shape[0] if x.dim() else 1, context_len, dim)
    try:
        out, _ = attn(x, context, causal=causal, key_padding_mask=mask)
    except ACCEPTED as err:
        event(f"refused: {type(err).__name__}")
        return
    event("result: attention output")
    assert out.shape == x.shape


# -- files: safetensors ----------------------------------------------------------------------------------
def _valid_safetensors() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        gen = torch.Generator().manual_seed(0)
        save_file({"transformer.wte.weight": torch.randn(12, 8, generator=gen),
                   "transformer.wpe.weight": torch.randn(10, 8, generator=gen)}, f"{tmp}/m.safetensors")
        return Path(f"{tmp}/m.safetensors").read_bytes()


VALID = _valid_safetensors()


@st.composite
def mutated(draw):
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "header"]))
        if kind == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del data[draw(st.integers(0, len(data))):]
        elif kind == "insert":
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.binary(max_size=16))
        else:  # rewrite a header byte among the JSON (dtype, shapes, offsets)
            if len(data) > 16:
                i = draw(st.integers(8, min(len(data) - 1, 8 + int.from_bytes(VALID[:8], "little"))))
                data[i] = ord(draw(st.sampled_from(list('0123456789[]{}",:-eE.'))))
    return bytes(data)


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"non-standard JSON constant {name} in a report")


@given(data=st.one_of(st.binary(max_size=256), mutated()))
def test_inspect_reads_any_bytes_as_a_result_or_a_clear_error(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        path.write_bytes(data)
        try:
            result = inspect_checkpoint(load_checkpoint(path), sample=20)
        except ACCEPTED as err:
            event(f"refused: {type(err).__name__}")
            return
        event("result: measured")
        text = dumps(result)  # the result is plain data that strict JSON can hold (raises on NaN/inf)
        assert isinstance(result, dict) and result, "a measured checkpoint gives a non-empty report"
        json.loads(text, parse_constant=_refuse_constant)  # and a strict parser reads it back


# -- files: training checkpoints ---------------------------------------------------------------------------
def _small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_decoder_only(ModelConfig(vocab_size=5, dim=8, num_heads=2, num_layers=1, position="rope"))


_SAVED: dict[str, Path] = {}


def _saved_run() -> Path:
    if "run" not in _SAVED:
        root = Path(tempfile.mkdtemp(prefix="posenc-fuzz-"))
        model = _small_model()
        opt = torch.optim.AdamW(model.parameters())
        model(torch.zeros(1, 3, dtype=torch.long)).sum().backward()
        opt.step()
        ckpt.save_checkpoint(root / "run", model=model, step=3, optimizer=opt, state={"task": "copy"})
        _SAVED["run"] = root / "run"
    return _SAVED["run"]


JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), INTS, EDGE_FLOATS, st.text(max_size=8)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                           max_leaves=6)


@given(field=st.sampled_from(["step", "files", "model_config", "rng_ranks", "optimizer", "state", "format",
                              "version", "model_class"]),
       value=JSON_VALUES, file_edit=st.one_of(st.none(), st.tuples(
           st.sampled_from([ckpt.MODEL_FILE, ckpt.OPTIMIZER_FILE, ckpt.RNG_FILE]), st.integers(0, 10_000))),
       latest=st.one_of(st.none(), st.text(max_size=20)))
def test_resume_from_a_tampered_checkpoint_is_exact_or_refused(field, value, file_edit, latest):
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(_saved_run(), run)
        step_dir = run / "step-00000003"
        meta = json.loads((step_dir / ckpt.STATE_FILE).read_text())
        original = json.loads(json.dumps(meta))
        meta[field] = value
        (step_dir / ckpt.STATE_FILE).write_text(json.dumps(meta))
        if file_edit is not None:
            name, offset = file_edit
            data = bytearray((step_dir / name).read_bytes())
            data[offset % len(data)] ^= 0x5A
            (step_dir / name).write_bytes(bytes(data))
        if latest is not None:
            (run / ckpt.LATEST).write_text(latest)
        model = _small_model()
        for p in model.parameters():
            p.data.zero_()
        opt = torch.optim.AdamW(model.parameters())
        try:
            loaded = ckpt.load_checkpoint(run, model=model, optimizer=opt)
        except (*ACCEPTED, FileNotFoundError) as err:
            event(f"refused: {type(err).__name__}")
            return
        event("loaded (verified equal to the saved checkpoint)")
        # accepted: then it must be the checkpoint as saved — same step, same weights, same files
        assert loaded["step"] == 3 and loaded["files"] == original["files"]
        assert file_edit is None
        reference = _small_model()
        ckpt.load_weights(_saved_run(), reference)
        for a, b in zip(model.state_dict().values(), reference.state_dict().values()):
            assert torch.equal(a, b)


# -- the command line ---------------------------------------------------------------------------------------
ARG_VALUES = st.sampled_from(["-1", "0", "1", "2", "3", "8", "16", "nan", "inf", "1e30", str(2**64), "abc", "",
                              ",", "-", "rope", "rope,rope", "copy", "distance-only", "alibi,t5", "0/2", "1/0",
                              "base=nan", "base=1e300", "init_c=1e300", "gamma=inf", "max_len=0", "factor=1e300",
                              "x=1", "=", "decoder-only"])
TRAIN_FLAGS = ["--lr", "--batch-size", "--eval-examples", "--threads", "--dropout", "--seed", "--layers",
               "--test-max", "--train-max", "--steps", "--dim", "--heads", "--task", "--position", "--checkpoint-every",
               "--eval-every"]
LAB_FLAGS = ["--only", "--dim", "--length", "--base", "--seed"]
INSPECT_FLAGS = ["--max-positions", "--neighbours", "--sample", "--seed", "--rows", "--position-offset", "--tokens",
                 "--position-tensor"]
# lengthgen without --jobs (each job is a process) and with files off; every cell is tiny
LENGTHGEN_FLAGS = ["--task", "--position", "--seeds", "--steps", "--dim", "--heads", "--layers", "--train-max",
                   "--test-max", "--threshold", "--eval-every", "--eval-examples", "--batch-size", "--lr", "--shard",
                   "--framing"]
DEMO_FLAGS = ["--kind", "--position", "--position-option", "--dim", "--heads", "--layers", "--vocab", "--seed"]
SCHEMES_FLAGS = ["--dim", "--heads"]


@st.composite
def argv(draw):
    command = draw(st.sampled_from(["train", "lab", "inspect", "schemes", "lengthgen", "demo"]))
    flags = {"train": TRAIN_FLAGS, "lab": LAB_FLAGS, "inspect": INSPECT_FLAGS, "schemes": SCHEMES_FLAGS,
             "lengthgen": LENGTHGEN_FLAGS, "demo": DEMO_FLAGS}[command]
    pairs = draw(st.lists(st.tuples(st.sampled_from(flags), ARG_VALUES), max_size=3))
    base = {"train": ["train", "--quick", "--steps", "2", "--eval-examples", "2", "--dim", "8", "--heads", "2",
                      "--layers", "1", "--quiet"],
            "lab": ["lab", "--only", "distance-only", "--length", "16", "--dim", "8", "--out", "-", "--quiet"],
            "inspect": ["inspect", "@MODEL"], "schemes": ["schemes"],
            "lengthgen": ["lengthgen", "--task", "copy", "--position", "rope", "--seeds", "0", "--steps", "2",
                          "--dim", "8", "--heads", "2", "--layers", "1", "--eval-examples", "2", "--train-max", "2",
                          "--test-max", "3", "--quiet", "--out", "-"],
            "demo": ["demo", "--dim", "8", "--heads", "2", "--layers", "1", "--vocab", "12"]}[command]
    extra = [token for pair in pairs for token in pair]
    if "--checkpoint-every" in extra:  # only meaningful with a checkpoint directory: give it one
        extra += ["--checkpoint-dir", "@RUN"]
    return [*base, *extra]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    (folder / "model.safetensors").write_bytes(VALID)
    return folder


@settings(max_examples=max(10, settings.default.max_examples // 8))  # each example may train for a second
@given(args=argv())
def test_any_command_line_exits_0_1_or_2_with_one_line_and_no_traceback(args, model_dir, monkeypatch):
    with tempfile.TemporaryDirectory() as run:
        args = [str(model_dir) if a == "@MODEL" else str(Path(run) / "run") if a == "@RUN" else a for a in args]
        with contextlib.chdir(run):  # a drawn value taken as an output path (`--json 16`) lands there
            result = posenc(*args)
    note(f"{args} -> {result.code}: {result.err[-300:]}")
    event(f"exit {result.code}")
    assert result.code in (0, 1, 2)
    assert "Traceback" not in result.err
    if result.code:
        assert sum("error:" in line for line in result.err.splitlines()) == 1


# -- model files (issue 25): GGUF headers and metadata, config.json fields, tokenizer files -------------------------
import resource  # noqa: E402

from model_files import BASE_CONFIG, hf_folder, tiny_gguf_bytes  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402

#: Address space a model-file example may add to the process: a memory bomb ends as MemoryError (a failure).
MODEL_FILE_CAP = 3 << 30
MODEL_REFUSALS = (*ACCEPTED, FileNotFoundError, FloatingPointError)  # CheckpointError/GGUFError are ValueErrors


@pytest.fixture
def memory_cap(hf_base):
    """RLIMIT_AS at the current size + 3 GiB while the property runs (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        current = int(f.read().split()[0]) * resource.getpagesize()
    cap = current + MODEL_FILE_CAP if hard == resource.RLIM_INFINITY else min(current + MODEL_FILE_CAP, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    yield
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


TINY_GGUF = tiny_gguf_bytes()
_HEADER_END = TINY_GGUF.index(b"token_embd.weight") + 200  # metadata and tensor infos lie before this


@st.composite
def gguf_mutated(draw):
    data = bytearray(TINY_GGUF)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "u64", "u32"]))
        i = draw(st.integers(0, min(len(data), _HEADER_END) - 1)) if data else 0
        if kind == "flip" and data:
            data[i] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del data[draw(st.integers(0, len(data))):]
        elif kind == "insert":
            data[i:i] = draw(st.binary(max_size=12))
        elif len(data) >= i + 8:  # a count, length or dimension replaced by an edge value
            size = 8 if kind == "u64" else 4
            value = draw(st.sampled_from([0, 1, 2**31 - 1, 2**32 - 1, 2**62, 2**63, 2**64 - 1]))
            data[i:i + size] = (value % (1 << (8 * size))).to_bytes(size, "little")
    return bytes(data)


def assert_forward_finite_or_refused(pm) -> None:
    ids = torch.tensor([[min(1, pm.config.vocab_size - 1)] * 3])
    try:
        out = pm.model.generate(ids, 2)
    except MODEL_REFUSALS as err:
        event(f"generate refused: {type(err).__name__}")
        return
    event("loaded and generated")
    assert out.shape == (1, 5)


#: Model-file examples load a model (and a long --window 2 scoring run can take a minute on a loaded machine).
MODEL_DEADLINE = 120_000


@settings(max_examples=max(10, settings.default.max_examples // 2), deadline=MODEL_DEADLINE)
@given(data=gguf_mutated())
def test_any_gguf_bytes_load_as_a_model_or_a_clear_error(data, memory_cap):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.gguf"
        path.write_bytes(data)
        try:
            pm = load_pretrained(path)
        except MODEL_REFUSALS as err:
            event(f"refused: {type(err).__name__}")
            assert str(path) in str(err) or "m.gguf" in str(err), f"the message names no file: {err}"
            return
        assert_forward_finite_or_refused(pm)


CONFIG_FIELDS = sorted({*BASE_CONFIG, "head_dim", "rope_scaling", "rope_parameters", "partial_rotary_factor",
                        "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window"} - {"architectures"})
_FOLDER: dict[str, Path] = {}


@pytest.fixture(scope="module")
def hf_base() -> Path:
    """The shared HF folder and one load of each model file, done before any example is timed."""
    folder = _base_folder()
    load_pretrained(folder)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "m.gguf").write_bytes(TINY_GGUF)
        load_pretrained(Path(tmp) / "m.gguf")
    return folder


def _base_folder() -> Path:
    if "hf" not in _FOLDER:
        _FOLDER["hf"] = hf_folder(Path(tempfile.mkdtemp(prefix="posenc-fuzz-hf-")) / "m")
    return _FOLDER["hf"]


def _folder_with(tmp: str, config: dict | None = None, files: dict[str, bytes] | None = None) -> Path:
    """A model folder in ``tmp`` sharing the base folder's files (symlinks), with config.json / files replaced."""
    base, folder = _base_folder(), Path(tmp) / "m"
    folder.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(base / name)
    (folder / "config.json").write_text(json.dumps(config if config is not None else BASE_CONFIG))
    for name, raw in (files or {}).items():
        (folder / name).unlink(missing_ok=True)
        (folder / name).write_bytes(raw)
    return folder


@settings(max_examples=max(10, settings.default.max_examples // 2), deadline=MODEL_DEADLINE)
@given(field=st.sampled_from(CONFIG_FIELDS), value=st.one_of(st.just("<removed>"), JSON_VALUES,
                                                              st.sampled_from([10**9, 2**32 - 1, "false", "abc"])))
def test_any_config_json_field_loads_or_is_refused(field, value, memory_cap):
    config = {k: v for k, v in BASE_CONFIG.items() if k != field}
    if value != "<removed>":
        config[field] = value
    note(f"config.json {field} = {value!r}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            pm = load_pretrained(_folder_with(tmp, config))
        except MODEL_REFUSALS as err:
            event(f"refused: {type(err).__name__}")
            return
        assert_forward_finite_or_refused(pm)


TEMPLATE_PIECES = st.sampled_from(["{{ messages[0]['content'] }}", "{% for m in messages %}", "{% endfor %}",
                                   "{{ bos_token }}", "{{ raise_exception('no') }}", "{% if x %}", "{% endif %}",
                                   "{{ 'a' * 99999999 }}", "{% for i in range(99999) %}", "{{", "}}", "text"])


@settings(max_examples=max(10, settings.default.max_examples // 2), deadline=MODEL_DEADLINE)
@given(tokenizer_config=st.one_of(
           st.none(), JSON_VALUES,
           st.fixed_dictionaries({}, optional={"chat_template": st.one_of(
               JSON_VALUES, st.lists(TEMPLATE_PIECES, max_size=6).map("".join)),
               "bos_token": JSON_VALUES, "eos_token": JSON_VALUES})),
       tokenizer_edit=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.binary(min_size=1, max_size=8))))
def test_any_tokenizer_files_load_and_encode_or_are_refused(tokenizer_config, tokenizer_edit, memory_cap):
    files = {} if tokenizer_config is None else {"tokenizer_config.json": json.dumps(tokenizer_config).encode()}
    if tokenizer_edit is not None:
        raw = bytearray((_base_folder() / "tokenizer.json").read_bytes())
        at, junk = tokenizer_edit
        raw[at % len(raw):at % len(raw) + len(junk)] = junk
        files["tokenizer.json"] = bytes(raw)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            pm = load_pretrained(_folder_with(tmp, files=files))
            ids = pm.tokenizer.encode("the fox")
            if pm.tokenizer.chat_template:
                pm.tokenizer.encode_chat([{"role": "user", "content": "hi"}])
        except MODEL_REFUSALS as err:
            event(f"refused: {type(err).__name__}")
            assert "\n" not in str(err)
            return
        event("loaded and encoded")
        assert all(0 <= i < pm.config.vocab_size for i in ids)


MODEL_ARGS = st.sampled_from(["-1", "0", "1", "2", "3", "16", "nan", "inf", "-inf", "1e-300", "1e30", str(2**64),
                              str(10**12), "abc", "", "-", "0.5"])
MODEL_FLAGS = {"generate": ["--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--system",
                            "--dtype", "--pairing", "--json"],
               "perplexity": ["--window", "--stride", "--max-tokens", "--dtype", "--pairing", "--json",
                              "--per-token"],
               "inspect": ["--max-positions", "--neighbours", "--sample", "--rows", "--tokens"]}


@st.composite
def model_argv(draw):
    command = draw(st.sampled_from(sorted(MODEL_FLAGS)))
    model = draw(st.sampled_from(["@GGUF", "@HF"]))
    base = {"generate": ["generate", model, "--prompt", "ab c", "--max-new-tokens", "2", "--quiet"],
            "perplexity": ["perplexity", model, "@TEXT", "--quiet"],
            "inspect": ["inspect", model, "--out", "-"]}[command]
    pairs = draw(st.lists(st.tuples(st.sampled_from(MODEL_FLAGS[command]), MODEL_ARGS), max_size=3))
    extra = [t for pair in pairs for t in pair]
    if draw(st.booleans()) and command == "generate":
        extra.append("--chat")
    return [*base, *extra]


@settings(max_examples=max(10, settings.default.max_examples // 4), deadline=MODEL_DEADLINE)
@given(args=model_argv())
def test_any_model_command_line_exits_0_1_or_2_naming_what_failed(args, memory_cap):
    with tempfile.TemporaryDirectory() as tmp:
        gguf_path, text = Path(tmp) / "m.gguf", Path(tmp) / "t.txt"
        gguf_path.write_bytes(TINY_GGUF)
        text.write_text("ab c ab e " * 6)
        args = [str(gguf_path) if a == "@GGUF" else str(_base_folder()) if a == "@HF" else str(text) if a == "@TEXT"
                else a for a in args]
        with contextlib.chdir(tmp):  # `--json inf` writes ./inf: into the temporary folder, not the repository
            result = posenc(*args)
    note(f"{args} -> {result.code}: {result.err[-300:]}")
    event(f"exit {result.code}")
    assert result.code in (0, 1, 2)
    assert "Traceback" not in result.err
    if result.code:
        assert sum("error:" in line for line in result.err.splitlines()) == 1
        assert "unexpected" not in result.err, result.err
