"""The shared CLI flags: one spelling, one meaning, clear usage errors."""

import argparse
import json

import pytest

from posenc import cli_options as co
from posenc.positions import aliases, names


def parser(**position_kwargs) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    co.add_position(p, **position_kwargs)
    co.add_quiet(p)
    co.add_out(p, default="t-out")
    co.add_json(p)
    co.add_seed(p)
    co.add_threads(p)
    co.add_device(p)
    co.add_dtype(p)
    return p


@pytest.mark.parametrize("alias", sorted(aliases()))
def test_position_resolves_aliases(alias):
    assert parser().parse_args(["--position", alias]).position == aliases()[alias]


def test_unknown_position_is_a_usage_error_listing_the_names(capsys):
    with pytest.raises(SystemExit) as exit_:
        argparse.ArgumentParser(parents=[parser()], add_help=False).parse_args(["--position", "ropee"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "'ropee'" in err and all(n in err for n in names())


def test_many_positions_keep_order_drop_repeats_and_expand_all():
    p = parser(many=True, default=None)
    assert p.parse_args(["--position", "rope,nope,none,alibi"]).position == ["rope", "none", "alibi"]
    assert p.parse_args(["--position", "all"]).position == names()


def test_position_options_are_typed_and_repeatable():
    args = parser().parse_args(["--position", "rope", "--position-option", "base=500000",
                                "--position-option", "pairing=interleaved", "--position-option", "f=[1, 2.5]",
                                "--position-option", "truncate=false"])
    assert co.position_options(args) == {"base": 500000, "pairing": "interleaved", "f": [1, 2.5], "truncate": False}


def test_position_option_without_equals_and_twice_given_are_errors():
    with pytest.raises(argparse.ArgumentError, match="KEY=VALUE"):
        parser().parse_args(["--position-option", "base"])
    args = parser().parse_args(["--position-option", "base=1", "--position-option", "base=2"])
    with pytest.raises(ValueError, match="base given twice"):
        co.position_options(args)


def test_out_dash_means_no_files_and_default_is_a_folder(tmp_path):
    assert co.out_dir(parser().parse_args(["--out", "-"])) is None
    assert str(co.out_dir(parser().parse_args([]))) == "t-out"
    assert co.out_dir(parser().parse_args(["--out", str(tmp_path)])) == tmp_path


def test_json_dash_prints_and_file_is_written(tmp_path, capsys):
    data = {"a": [1, 2], "b": "x"}
    assert co.write_json(parser().parse_args(["--json", "-"]), data) is None
    assert json.loads(capsys.readouterr().out) == data
    path = co.write_json(parser().parse_args(["--json", str(tmp_path / "sub" / "r.json")]), data)
    assert json.loads(path.read_text()) == data
    assert co.write_json(parser().parse_args([]), data) is None  # not asked: nothing written
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("bad", ["0", "-2", "two"])
def test_threads_must_be_positive(bad):
    with pytest.raises(argparse.ArgumentError, match="positive integer"):
        parser().parse_args(["--threads", bad])


def test_dtype_device_and_seed():
    import torch

    args = parser().parse_args(["--dtype", "bfloat16", "--seed", "7"])
    assert co.dtype_of(args) is torch.bfloat16 and args.seed == 7 and co.device_of(args) == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cpu"):
            co.device_of(parser().parse_args(["--device", "cuda"]))
