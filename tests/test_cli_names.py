"""Unknown names say which valid one is closest ("did you mean"), and --debug works before or after the command."""

import pytest

from posenc.cli import main, split_debug
from posenc.validation import did_you_mean


def test_did_you_mean_offers_the_closest_names_or_nothing():
    assert did_you_mean("rope-yarm", ["rope", "rope-yarn", "alibi"]).startswith(" (did you mean 'rope-yarn'")
    assert did_you_mean("ALIBI", ["alibi"]) == " (did you mean 'alibi'?)"
    assert did_you_mean("zzzz", ["rope", "alibi"]) == ""
    assert did_you_mean(None, ["rope"]) == ""


def test_unknown_scheme_names_the_closest(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--position", "rope-yarm"])
    assert exit_.value.code == 2
    assert "unknown position scheme 'rope-yarm' (did you mean 'rope-yarn'" in capsys.readouterr().err


def test_unknown_scheme_alias_is_offered():
    from posenc.positions import canonical

    with pytest.raises(ValueError, match=r"did you mean 'nope'"):
        canonical("nop")


def test_unknown_command_names_the_closest(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["shemes"])
    assert exit_.value.code == 2
    assert "invalid choice: 'shemes' (did you mean 'schemes'?)" in capsys.readouterr().err


def test_unknown_subcommand_and_choice_name_the_closest(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "serch"])
    assert "(did you mean 'search'?)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["lab", "propertys"])
    assert "(did you mean 'properties'?)" in capsys.readouterr().err


def test_unknown_extend_and_finetune_method_names_the_closest(capsys, tmp_path):
    from posenc.extend.methods import check_methods

    with pytest.raises(ValueError, match=r"unknown method 'rope-yarm' \(did you mean 'rope-yarn'"):
        check_methods(["rope-yarm"])
    assert main(["finetune", "run", str(tmp_path / "no-model"), "--method", "rope-lineer", "--factor", "2"]) == 2
    assert "(did you mean 'rope-linear'" in capsys.readouterr().err


def test_unknown_task_names_the_closest(capsys):
    from posenc.tasks import task_class

    with pytest.raises(ValueError, match=r"unknown task 'revers' \(did you mean 'reverse'\?\)"):
        task_class("revers")
    assert main(["lengthgen", "--task", "cpy", "--out", "-"]) == 2
    assert "(did you mean 'copy'?)" in capsys.readouterr().err


def test_unknown_retrieval_task_names_the_closest(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["extend", "model.gguf", "--tasks", "passkey,multikye"])
    assert exit_.value.code == 2
    assert "'multikye'" in (err := capsys.readouterr().err) and "did you mean 'multikey'" in err


def test_unknown_lab_experiment_names_the_closest(capsys):
    assert main(["lab", "--only", "sinusoid-nrm", "--out", "-", "--quiet"]) == 2
    assert "(did you mean 'sinusoid-norm'?)" in capsys.readouterr().err


def test_split_debug_takes_it_anywhere_before_a_double_dash():
    assert split_debug(["--debug", "lab"]) == (["lab"], True)
    assert split_debug(["lab", "--only", "x", "--debug"]) == (["lab", "--only", "x"], True)
    assert split_debug(["translate", "translate", "--", "--debug"]) == (["translate", "translate", "--", "--debug"],
                                                                         False)


@pytest.mark.parametrize("argv", [["--debug", "lab", "--only", "nosuch", "--out", "-"],
                                  ["lab", "--only", "nosuch", "--out", "-", "--debug"]])
def test_debug_before_or_after_the_command_shows_the_traceback(argv):
    with pytest.raises(ValueError, match="unknown experiment id"):
        main(argv)


def test_without_debug_the_error_is_one_line(capsys):
    assert main(["lab", "--only", "nosuch", "--out", "-"]) == 2
    assert capsys.readouterr().err.startswith("posenc: error: unknown experiment id")
