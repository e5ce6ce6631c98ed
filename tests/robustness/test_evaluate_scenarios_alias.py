"""Issue #35: ``dilemmax evaluate RUN --scenarios`` with its value left out (or a wrong one) is
answered by ``evaluate``'s own parser, in the words the user typed, not by the ``scenarios
evaluate --set`` the command line is rewritten into."""

from __future__ import annotations

import pytest

from dilemmax.cli import main


@pytest.mark.parametrize(
    ("tail", "words"),
    [
        ([], "argument --scenarios: expected one argument"),
        (["--episodes", "2"], "argument --scenarios: expected one argument"),
        (["--greedy"], "argument --scenarios: expected one argument"),
        (["bogus"], "argument --scenarios: invalid choice: 'bogus'"),
        (["="], "argument --scenarios: invalid choice"),
    ],
)
def test_a_missing_or_wrong_scenario_set_is_evaluate_s_own_error(tmp_path, capsys, tail, words):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"env": "consequence"}')
    argv = ["evaluate", str(run), "--scenarios", *tail]
    if tail == ["="]:
        argv = ["evaluate", str(run), "--scenarios="]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "dilemmax evaluate: error" in err, err
    assert "--set" not in err.splitlines()[-1]
