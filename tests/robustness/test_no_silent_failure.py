"""Issue #44: nothing fails silently. A model seat nobody answers stops the rollout instead of
reporting metrics it did not play; a transcript of another game version is refused by view; a
model as a training partner, or a base URL with a port no server can have, is refused at the
start; a process waiting for its coordinator says so at once. Each is one line.

In-process (``dilemmax.cli.main``) and without network: the one address called is a free port
of 127.0.0.1 that nothing listens on.
"""

from __future__ import annotations

import json
import re
import socket

import pytest
from test_cli_errors import _fails_cleanly  # the one-line, exit-2 check of every CLI probe

from dilemmax.envs.options import OptionError
from dilemmax.errors import UsageError
from dilemmax.llm.config import GenerateConfig
from dilemmax.train import distributed
from dilemmax.train.configure import make_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def nothing_trains(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the command got past its checks")

    monkeypatch.setattr("dilemmax.train.run.TrainingRun.train", forbidden)


# ----------------------------------------------------------------------------- a seat never played
@pytest.mark.slow
def test_rollout_with_an_unreachable_model_seat_fails_naming_the_seat(capsys):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    seat = f"agent_0=openai:m,base_url={url},max_attempts=1"
    argv = ["rollout", "moral_hazard", "--episodes", "1", "--seat", seat]
    err = _fails_cleanly(capsys, argv)
    assert "seat agent_0 (openai:m" in err and "failed after 1 attempt" in err
    assert "Connection" in err and "Traceback" not in err
    assert "episode(s)" not in capsys.readouterr().out  # no metrics as if the seat had played


# ----------------------------------------------------------------------------- versions
def _transcript(tmp_path, head: dict):
    path = tmp_path / "transcript.jsonl"
    path.write_text(json.dumps({"type": "run", "run": "r", "identity": {}, **head}) + "\n")
    return path


def test_view_refuses_a_transcript_of_another_game_version(capsys, tmp_path):
    path = _transcript(tmp_path, {"games": ["moral_hazard-v1"]})
    err = _fails_cleanly(capsys, ["view", str(path), "--out", str(tmp_path / "page.html")])
    assert "made under moral_hazard-v1, but this dilemmax has moral_hazard-v0" in err
    assert str(path) in err and not (tmp_path / "page.html").exists()


def test_view_names_a_games_field_that_is_not_a_list(capsys, tmp_path):
    path = _transcript(tmp_path, {"games": "moral_hazard-v0"})
    err = _fails_cleanly(capsys, ["view", str(path), "--out", str(tmp_path / "page.html")])
    expected = "games='moral_hazard-v0' is not allowed: expected a list of strings"
    assert f"{path} line 1: {expected}" in err


# ----------------------------------------------------------------------------- training partners
def test_a_model_training_partner_is_refused_before_training(capsys, tmp_path, nothing_trains):
    argv = ["train", "moral_hazard", "--set", "partner_policy=openai:m", "--no-progress",
            "--out", str(tmp_path / "run")]  # fmt: skip
    err = _fails_cleanly(capsys, argv)
    assert "partner_policy" in err and "training partners play inside JAX" in err
    assert not (tmp_path / "run").exists()
    with pytest.raises(OptionError, match="partner_policy: seat 'openai:m'"):  # from Python too
        make_config("moral_hazard", overrides={"partner_policy": "openai:m"})


# ----------------------------------------------------------------------------- base URLs
@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:99999/v1", "port 99999 is not in 1..65535"),
        ("http://127.0.0.1:0/v1", "port 0 is not in 1..65535"),
        ("http://127.0.0.1:eighty/v1", "its port is not a number"),
        ("http://:8000/v1", "no host"),
        ("ftp://127.0.0.1:8000/v1", "scheme 'ftp', not http(s)"),
    ],
)
def test_a_base_url_no_server_can_have_is_refused_naming_why(capsys, url, words):
    seat = f"agent_0=openai:m,base_url={url}"
    err = _fails_cleanly(capsys, ["rollout", "moral_hazard", "--episodes", "1", "--seat", seat])
    assert words in err
    err = _fails_cleanly(capsys, ["play", "moral_hazard", "--seats", "openai:m", "--base-url", url])
    assert f"--base-url {url!r}: {words}" in err
    with pytest.raises(OptionError, match=re.escape(words)):
        GenerateConfig(base_url=url).check()


def test_a_valid_base_url_with_a_port_passes():
    config = GenerateConfig(base_url="http://127.0.0.1:65535/v1|http://[::1]:8000/v1").check()
    assert config.base_url == ("http://127.0.0.1:65535/v1", "http://[::1]:8000/v1")


# ----------------------------------------------------------------------------- the coordinator
def test_a_process_waiting_for_its_coordinator_says_so_at_once(capsys, monkeypatch):
    said_before_waiting = []

    def nobody_listens(host, port, timeout):
        said_before_waiting.append(capsys.readouterr().err)
        return False

    monkeypatch.setattr(distributed, "_wait_for_listener", nobody_listens)
    port = _free_port()
    cluster = distributed.Cluster(
        coordinator=f"127.0.0.1:{port}", num_processes=2, process_id=1, init_timeout=7
    )
    with pytest.raises(UsageError, match="process 0 \\(the coordinator\\) is missing"):
        distributed.join(cluster)
    assert said_before_waiting == [
        f"dilemmax train: process 1 of 2: waiting up to 7 s for process 0 (the coordinator) at "
        f"127.0.0.1:{port} (--init-timeout)\n"
    ]
