"""Training configurations are checked field by field before anything compiles, and a config
received as data cannot make the trainer import a module (issue #11, "Training")."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from dilemmax.agents.transforms import resolve_learner_transform
from dilemmax.envs.options import OptionError
from dilemmax.train.config import FIELD_RANGES, TrainConfig, describe_fields, field_doc, field_spec
from dilemmax.train.configure import make_config, parse_sets


@pytest.mark.parametrize(
    ("pair", "words"),
    [
        ("lr=NaN", "lr=nan"),
        ("lr=nan", "lr=nan"),
        ("lr=fast", "lr='fast'"),
        ("lr=0", "(0, 1]"),
        ("num_minibatches=0", "num_minibatches=0"),
        ("num_envs=0", "num_envs=0"),
        ("num_envs=-4", "num_envs=-4"),
        ("log_every=0", "log_every=0"),
        ("checkpoint_every=0", "checkpoint_every=0"),
        ("eval_episodes=0", "eval_episodes=0"),
        ("gamma=1.5", "[0, 1]"),
        ("total_timesteps=2.5", "total_timesteps='2.5'"),
        ("anneal_lr=maybe", "true or false"),
        ("algo=dqn", "'ippo'"),
        ("conv_features=[16,-1]", "conv_features"),
        ("learner_transform=os:system", "learner_transform='os:system'"),
        ("nmu_envs=3", "did you mean 'num_envs'"),
        ("env_kwargs.sorted_agents=maybe", "sorted_agents"),
        ("env_kwargs.colour=red", "unknown option 'colour'"),
        ("noequals", "key=value"),
    ],
)
def test_bad_set_is_refused_before_compiling(pair, words):
    with pytest.raises(OptionError) as err:
        make_config("consequence", "ippo", parse_sets([pair], "consequence"))
    assert words in str(err.value)


def test_values_given_as_data_are_checked_too():
    for bad in ({"lr": float("nan")}, {"num_envs": 6, "num_minibatches": 4}, {"learners": [0, 0]}):
        with pytest.raises(OptionError):
            make_config("consequence", "ippo", bad)
    with pytest.raises(OptionError, match="unknown config key"):
        TrainConfig.from_dict({"lr": 0.1, "surprise": 1})
    with pytest.raises(OptionError, match="train_grid"):
        make_config("consequence", "ippo", {"train_grid": "__class__"})


def test_typed_sets_keep_their_meaning():
    sets = ["env_kwargs.sorted_agents=false", "total_timesteps=1e5", "lr=1e-3", "shard=off"]
    config = make_config("consequence", "ippo", parse_sets(sets, "consequence"))
    assert config.env_kwargs == {"sorted_agents": False}
    assert config.total_timesteps == 100_000 and config.lr == 0.001 and config.shard == "off"


_WRONG_BY_KIND = {"int": "seven", "float": "fast", "bool": "maybe", "str": 7, "list": 3, "dict": 3}


def test_every_field_refuses_a_value_of_the_wrong_type():
    # Generic: also covers fields added later, through their annotation.
    for f in dataclasses.fields(TrainConfig):
        spec = field_spec(f.name)
        if spec.kind not in _WRONG_BY_KIND:
            continue
        config = TrainConfig()
        setattr(config, f.name, _WRONG_BY_KIND[spec.kind])
        with pytest.raises(OptionError, match=f.name):
            config.validate()
    assert set(FIELD_RANGES) <= {f.name for f in dataclasses.fields(TrainConfig)}


def test_learner_transform_is_never_imported_from_a_config(monkeypatch):
    imported = []
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: imported.append(name))
    for name in ("os:system", "subprocess:run", "dilemmax.train.test_ppo:script_everything_x"):
        with pytest.raises(OptionError, match="not one of the allowed"):
            resolve_learner_transform(name)
    assert imported == []


def test_the_packages_own_transform_resolves():
    from dilemmax.envs.moral_hazard.policies import with_scripted_followup

    name = "dilemmax.envs.moral_hazard.policies:with_scripted_followup"
    assert resolve_learner_transform(name) is with_scripted_followup
    assert make_config("moral_hazard", "ippo", {"learner_transform": name}).learner_transform


# ----------------------------------------------------------------------------- declared once
def test_every_field_is_declared_with_its_meaning_and_a_type():
    """A field's type, default, range and meaning sit in its declaration; the class docstring
    is an overview that restates no field."""
    for f in dataclasses.fields(TrainConfig):
        assert field_doc(f.name), f"{f.name} has no meaning in its declaration"
        assert field_spec(f.name).kind != "any", f"{f.name} has no type a check can read"
    assert len(TrainConfig.__doc__) < 1000


def test_train_help_lists_every_key_with_its_meaning(capsys):
    from dilemmax.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for f in describe_fields():
        assert f"{f.name}=" in shown and f.doc in shown and f.allowed in shown, f.name


def test_a_set_out_of_range_or_unknown_is_one_line_with_the_fields_meaning(capsys, tmp_path):
    from dilemmax.cli import main

    out = tmp_path / "run"
    for pair, words in (("lr=5", "lr=5.0"), ("nmu_envs=3", "did you mean 'num_envs'")):
        assert main(["train", "consequence", "--set", pair, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Traceback" not in err, err
        name = pair.split("=")[0].replace("nmu_envs", "num_envs")
        assert words in err and field_doc(name) in err, err
    assert not out.exists()
