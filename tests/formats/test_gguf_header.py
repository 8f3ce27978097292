"""The bounded GGUF header walk: every count, length and shape is checked before the gguf reader allocates.

The memory bombs run in a child process capped at 2 GiB of address space and 120 s, so a regression
fails the test (a MemoryError or a timeout in the child) instead of taking the machine.
"""

from __future__ import annotations

import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from gguf_bytes import ARRAY, FLOAT32, STRING, UINT32, UINT64, gguf, kv, string, tensor_info, write  # noqa: E402

from posenc.formats.gguf import GGUFError, open_gguf, read_gguf  # noqa: E402
from posenc.formats.gguf_header import check_header  # noqa: E402

CAP = 2 << 30
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _capped_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def read_in_capped_child(path: Path, call: str = "read_gguf") -> str:
    """Run ``posenc.formats.gguf.<call>(path)`` in a memory-capped child; its one-line outcome."""
    code = (f"import sys; sys.path.insert(0, {SRC!r})\n"
            f"from posenc.formats.gguf import {call}\n"
            f"try:\n    {call}({str(path)!r}); print('READ')\n"
            "except Exception as err:\n    print(type(err).__name__ + ': ' + str(err))\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             preexec_fn=_capped_child)
    except subprocess.TimeoutExpired:
        return "TIMEOUT (the reader kept going)"
    return (out.stdout + out.stderr).strip().splitlines()[-1] if (out.stdout + out.stderr).strip() else "no output"


def arch_kvs(**overrides) -> list[bytes]:
    """The llama metadata of a tiny model (1 layer, width 32, 2 heads) — no tokenizer."""
    keys = {"general.architecture": (STRING, "llama"), "llama.block_count": (UINT32, 1),
            "llama.embedding_length": (UINT32, 32), "llama.feed_forward_length": (UINT32, 64),
            "llama.attention.head_count": (UINT32, 2), "llama.context_length": (UINT32, 128), "llama.vocab_size": (UINT32, 16),
            "llama.attention.layer_norm_rms_epsilon": (FLOAT32, 1e-5)}
    keys.update(overrides)
    return [kv(k, t, v) for k, (t, v) in keys.items() if t is not None]


def test_a_small_valid_header_is_walked(tmp_path: Path) -> None:
    data = struct.pack("<8f", *range(8))
    path = write(tmp_path / "ok.gguf", gguf(arch_kvs(), [tensor_info("output_norm.weight", (8,))], data))
    header = check_header(path)
    assert header.tensors == [("output_norm.weight", 0, (8,))]
    assert header.metadata["llama.block_count"].value == 1
    open_gguf(path)  # and the gguf reader takes it


def test_an_array_claiming_2_62_entries_in_132_bytes_is_refused_before_the_reader(tmp_path: Path) -> None:
    bomb = gguf([kv("general.architecture", STRING, "llama"),
                 string("tokenizer.ggml.token_type") + struct.pack("<IIQ", ARRAY, 0, 2**62)])  # uint8
    path = write(tmp_path / "bomb.gguf", bomb)
    assert len(bomb) <= 132
    outcome = read_in_capped_child(path)
    assert outcome.startswith("GGUFError: "), outcome
    assert "bomb.gguf" in outcome and "tokenizer.ggml.token_type" in outcome and f"{2**62:,}" in outcome


@pytest.mark.parametrize("case", ["string", "key", "kv_count", "tensor_count", "strings"])
def test_claimed_lengths_beyond_the_file_are_refused(tmp_path: Path, case: str) -> None:
    kvs, tensors, counts = arch_kvs(), [], {}
    if case == "string":
        kvs.append(string("general.name") + struct.pack("<I", STRING) + string(b"x", claimed=2**63))
    elif case == "key":
        kvs.append(string(b"k", claimed=2**40))
    elif case == "kv_count":
        counts["kv_count"] = 2**60
    elif case == "tensor_count":
        counts["tensor_count"] = 2**60
    else:
        kvs.append(string("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, 10**15) + string("a"))
    path = write(tmp_path / f"{case}.gguf", gguf(kvs, tensors, **counts))
    with pytest.raises(GGUFError, match=rf"{case}\.gguf: .*truncated or corrupt"):
        check_header(path)


@pytest.mark.parametrize("dims, ggml_type, fragment", [
    ((2**32, 2**32, 1), 0, "ends at byte"),  # 2⁶⁴ elements: numpy's product wraps to 0, Python's does not
    ((8, 8, 8, 8, 8), 0, "5 dimensions"),
    ((8, 0), 0, "every dimension must be >= 1"),
    ((8,), 999, "GGML type 999"),
    ((33,), 8, "not whole blocks of 32"),  # Q8_0
])
def test_tensor_infos_are_checked(tmp_path: Path, dims, ggml_type, fragment) -> None:
    path = write(tmp_path / "t.gguf", gguf(arch_kvs(), [tensor_info("output_norm.weight", dims, ggml_type)],
                                           b"\0" * 64))
    with pytest.raises(GGUFError, match=fragment):
        check_header(path)


def test_the_reader_cost_of_the_metadata_is_held_to_the_memory_budget(tmp_path: Path, monkeypatch) -> None:
    n = 200_000  # 200 kB in the file; the reader would hold about 200 MB of numpy views
    many = string("tokenizer.ggml.token_type") + struct.pack("<IIQ", ARRAY, 0, n) + b"\1" * n
    path = write(tmp_path / "many.gguf", gguf([*arch_kvs(), many]))
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(64 << 20))
    with pytest.raises(GGUFError, match=r"many\.gguf: the metadata holds 200,00\d values.*POSENC_MEMORY_BUDGET"):
        check_header(path)
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(1 << 30))  # raised on purpose: read
    check_header(path)


def test_a_block_count_of_2_32_minus_1_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    path = write(tmp_path / "layers.gguf", gguf(arch_kvs(**{"llama.block_count": (UINT32, 2**32 - 1)})))
    outcome = read_in_capped_child(path)
    assert outcome.startswith("GGUFError: ") and "layers.gguf" in outcome, outcome
    assert "llama.block_count" in outcome and "4294967295" in outcome and "4,096" in outcome


@pytest.mark.parametrize("key, kind, value, want", [
    ("llama.attention.head_count", UINT32, 0, "an integer from 1"),  # was ZeroDivisionError
    ("llama.embedding_length", STRING, "abc", "an integer from 1"),
    ("llama.feed_forward_length", FLOAT32, 64.0, "an integer from 1"),
    ("llama.attention.layer_norm_rms_epsilon", FLOAT32, float("nan"), "a finite number > 0"),
    ("llama.attention.layer_norm_rms_epsilon", FLOAT32, -1e-5, "a finite number > 0"),
    ("llama.rope.freq_base", FLOAT32, 0.5, "a finite number > 1"),
    ("llama.rope.scaling.factor", FLOAT32, 0.0, "a finite number > 0"),
    ("general.architecture", UINT32, 7, "a string"),
    ("tokenizer.ggml.tokens", STRING, "abc", "an array of strings"),
    ("tokenizer.ggml.eos_token_id", UINT32, 10**9, "a token id"),
    ("tokenizer.chat_template", UINT32, 1, "a string"),
    ("tokenizer.ggml.add_bos_token", STRING, "false", "a bool"),
])
def test_hostile_metadata_values_are_refused_by_key(tmp_path: Path, key, kind, value, want) -> None:
    path = write(tmp_path / "meta.gguf", gguf(arch_kvs(**{key: (kind, value)})))
    with pytest.raises(GGUFError, match=rf"meta\.gguf: metadata {key} must be .*{want}"):
        check_header(path)


def test_a_malformed_merge_is_refused_in_one_line(tmp_path: Path) -> None:
    tokens = kv("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", "b", "ab"]))
    merges = kv("tokenizer.ggml.merges", ARRAY, (STRING, ["a b", "ab"]))
    path = write(tmp_path / "merge.gguf", gguf([*arch_kvs(), tokens, merges]))
    with pytest.raises(GGUFError, match=r"merge\.gguf: metadata tokenizer\.ggml\.merges\[1\] = 'ab' is not a merge") \
            as err:
        check_header(path)
    assert "\n" not in str(err.value)


def test_non_utf8_strings_and_duplicate_keys_are_named(tmp_path: Path) -> None:
    bad = string("general.name") + struct.pack("<I", STRING) + string(b"\xff\xfe")
    with pytest.raises(GGUFError, match=r"u\.gguf: the value of 'general\.name' is not UTF-8"):
        check_header(write(tmp_path / "u.gguf", gguf([*arch_kvs(), bad])))
    twice = kv("general.name", STRING, "a")
    with pytest.raises(GGUFError, match=r"d\.gguf: metadata key 'general\.name' appears twice"):
        check_header(write(tmp_path / "d.gguf", gguf([*arch_kvs(), twice, twice])))


def test_a_file_without_a_token_list_is_refused_by_key(tmp_path: Path) -> None:
    from posenc.formats.gguf import read_tokenizer

    path = write(tmp_path / "notok.gguf", gguf([*arch_kvs(), kv("tokenizer.ggml.model", STRING, "gpt2")]))
    with pytest.raises(GGUFError, match=r"notok\.gguf: .*tokenizer\.ggml\.tokens"):  # was KeyError
        read_tokenizer(path)


def test_uint64_sizes_are_fine_when_in_range(tmp_path: Path) -> None:
    path = write(tmp_path / "u64.gguf", gguf(arch_kvs(**{"llama.block_count": (UINT64, 2)})))
    assert check_header(path).metadata["llama.block_count"].value == 2


def test_a_merge_of_tokens_outside_the_vocabulary_is_one_line_naming_the_file(tmp_path: Path) -> None:
    from posenc.formats.gguf import read_tokenizer

    kvs = [*arch_kvs(), kv("tokenizer.ggml.model", STRING, "gpt2"),
           kv("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", "b"])), kv("tokenizer.ggml.merges", ARRAY, (STRING, ["a b"]))]
    path = write(tmp_path / "m.gguf", gguf(kvs))
    with pytest.raises(GGUFError, match=r"m\.gguf: the tokenizer metadata is inconsistent"):  # was a Rust panic
        read_tokenizer(path)
