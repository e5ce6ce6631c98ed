"""Each env option is declared once, in its constructor's signature (issue #36, "one home per
concept"): ``name: Annotated[type, Option(meaning, **range)] = default``. ``option_specs``, the
``Args:`` of the class docstring and the game's docs page are all read from that declaration
(tests/test_one_home.py refuses a hand-written ``option_specs`` or ``Args:`` on an env)."""

from __future__ import annotations

import inspect
import pydoc
from typing import Annotated

import pytest

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.option_declaration import Option, signature_options
from dilemmax.envs.option_spec import OptionError, OptionSpec
from dilemmax.envs.options import check_env_options, constructor_specs, env_option_specs
from dilemmax.envs.registry import env_spec, registered_envs
from dilemmax.scenarios.env import ScenarioEnv

S = OptionSpec

# option -> (what it allows, its default) for every env dilemmax registers: what each allowed
# before the declarations moved into the signatures (the class's option_specs, else the
# annotation). moral_hazard is written from the game's rules: n = 2..9 agents, the three
# mappings of the unsafe options, anonymous or visible notes, team or private pay, and a cost
# and three weights in [0, 1] (k = 0.1, w_L = 0.35, w_F = 0.15, w_T = 0.5 in the primary
# condition).
UNIT = S("float", low=0.0, high=1.0)
MORAL_HAZARD = {
    "num_agents": (S("int", low=2, high=9), 2),
    "mapping": (S("str", choices=("highest", "uninformative", "lowest")), "highest"),
    "provenance": (S("str", choices=("anonymous", "visible")), "anonymous"),
    "payoff": (S("str", choices=("team", "private")), "team"),
    "cost": (UNIT, 0.1),
    "w_local": (UNIT, 0.35),
    "w_final": (UNIT, 0.15),
    "w_team": (UNIT, 0.5),
}
RULE = S("choice", choices=("AON", "RE", "DV", "RP", "PP", 0, 1, 2, 3, 4), casefold=True)
OBSERVATION = S("str", choices=("codes", "one_hot"))
SPLIT = S("str", choices=("train", "held_out", "all"))
POOL_SEED = S("int", low=0, high=2**31 - 3)
FRACTION = S("float", low=0.01, high=0.99)
BEFORE = {
    "consequence": {
        "num_agents": (S("int", low=2, high=16), 3),
        "num_rounds": (S("int", low=1, high=64), 3),
        "total_resources": (S("int", low=2, high=1024), 12),
        "sorted_agents": (S("bool"), False),
        "anonymous_rule": (S("bool"), False),
        "objective": (
            S("str", choices=("lexicographic", "survival", "resources", "shaped")),
            "lexicographic",
        ),
        "endgame": (S("str", choices=("all", "rule")), "all"),
        "rules": (S("list", optional=True, item=RULE, min_len=1, max_len=5), None),
    },
    "moral_hazard": MORAL_HAZARD,
    "open_cleanup": {
        "num_agents": (S("int", low=1, high=7), 5),
        "observation": (OBSERVATION, "codes"),
        "split": (SPLIT, "train"),
        "pool_seed": (POOL_SEED, 0),
        "num_layouts": (S("int", low=2, high=4096), 256),
        "num_rules": (S("int", low=2, high=1_000_000), 100_000),
        "train_fraction": (FRACTION, 0.8),
        "p_spawn": (UNIT, 0.1),
        "skew": (UNIT, 1.0),
        "zap": (S("bool"), False),
        "clean_reward": (S("float", low=-100.0, high=100.0), 0.0),
        "num_trials": (S("int", low=1, high=100), 5),
        "trial_steps": (S("int", low=1, high=10_000), 400),
        "height": (S("int", low=12, high=24), 12),
        "width": (S("int", low=16, high=32), 16),
        "recipe_length": (S("choice", choices=(1, 2)), 2),
        "num_tools": (S("int", low=2, high=4), 4),
        "num_hues": (S("int", low=1, high=5), 5),
    },
    "open_harvest": {
        "num_agents": (S("int", low=1, high=20), 5),
        "observation": (OBSERVATION, "codes"),
        "split": (SPLIT, "train"),
        "pool_seed": (POOL_SEED, 0),
        "num_layouts": (S("int", low=2, high=4096), 256),
        "num_rules": (S("int", low=2, high=1_000_000), 100_000),
        "train_fraction": (FRACTION, 0.8),
        "num_trials": (S("int", low=1, high=100), 5),
        "trial_steps": (S("int", low=1, high=10_000), 400),
        "stage_orders": (S("int", low=1, high=6), 6),
        "pay_levels": (
            S("list", item=S("float", low=-100.0, high=100.0), min_len=3, max_len=3),
            (1.0, 0.5, 0.25),
        ),
        "shared_pay_order": (S("bool"), False),
    },
    "scenarios": {
        "game": (
            S("str", choices=("consequence", "moral_hazard", "open_cleanup", "open_harvest")),
            "open_harvest",
        ),
        "scenario_set": (S("str", choices=("train", "test")), "train"),
    },
}

# Every env dilemmax registers (tests register toy envs of their own).
SHIPPED = [
    env_id
    for env_id in registered_envs(games_only=False)
    if env_spec(env_id).entry_point.startswith("dilemmax.")
]
# The env classes of dilemmax with constructor options, the unregistered base of scenarios too.
CLASSES = [env_spec(env_id).load() for env_id in SHIPPED] + [ScenarioEnv]


def test_the_table_covers_every_shipped_env():
    assert sorted(BEFORE) == sorted(SHIPPED)


@pytest.mark.parametrize("env_id", sorted(BEFORE))
def test_the_declarations_allow_what_the_options_allowed_before(env_id):
    env_cls = env_spec(env_id).load()
    declared = signature_options(env_cls.__init__)
    assert {name: (o.spec, o.default) for name, o in declared.items()} == BEFORE[env_id]
    specs = {name: spec for name, (spec, _) in BEFORE[env_id].items()}
    # Every reader sees the same: the class attribute, the checks and the --set parser.
    assert dict(env_cls.option_specs) == specs
    assert constructor_specs(env_cls) == specs
    assert env_option_specs(env_id) == specs


@pytest.mark.parametrize("env_cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_constructor_option_has_a_meaning(env_cls):
    declared = signature_options(env_cls.__init__)
    assert declared
    missing = [name for name, option in declared.items() if not option.doc]
    assert not missing, f"{env_cls.__name__}: no Option(meaning) for {missing}"


@pytest.mark.parametrize("env_cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_docstring_lists_each_option_from_its_declaration(env_cls):
    doc = inspect.getdoc(env_cls)
    head, args = doc.split("\nArgs:\n")
    assert head.strip() and "\nArgs:" not in args
    entries = " ".join(args.split())  # the wrapped lines as one text
    for name, option in signature_options(env_cls.__init__).items():
        assert f"    {name} ({option.type}): " in args, name
        described = option.spec.describe()
        default = "required" if option.required else f"default {option.default!r}"
        words = " ".join(f"{option.doc.rstrip('.')}. {described}; {default}.".split())
        assert words.lower() in entries.lower(), name
    assert "Args:" in pydoc.render_doc(env_cls)  # help() shows it


class _Undeclared(MultiAgentEnv):
    """A toy env: one option with a declaration, one with its annotation only."""

    def __init__(
        self,
        width: int = 3,
        mode: Annotated[str, Option("how it plays", choices=("fast", "slow"))] = "fast",
        scale: Annotated[float | None, Option("a factor", low=0.0)] = None,
    ):
        check_env_options(type(self), locals())


def test_an_option_without_a_declaration_is_checked_against_its_annotation():
    assert _Undeclared.option_specs["width"] == S("int")
    assert check_env_options(_Undeclared, {"width": 4, "mode": "slow"}) == {
        "width": 4,
        "mode": "slow",
    }
    with pytest.raises(OptionError, match=r"_Undeclared: option width='4' .* an integer"):
        check_env_options(_Undeclared, {"width": "4"})
    with pytest.raises(OptionError, match="mode='medium'"):
        check_env_options(_Undeclared, {"mode": "medium"})
    # The kind (and None, for a None default) comes from the annotation when left out.
    assert _Undeclared.option_specs["scale"] == S("float", low=0.0, optional=True)
    with pytest.raises(OptionError, match="scale=-1.0"):
        check_env_options(_Undeclared, {"scale": -1.0})
    assert "    width (int): An integer; default 3." in _Undeclared.__doc__


def test_option_specs_written_by_hand_are_refused():
    with pytest.raises(TypeError, match="declare each option in the constructor's signature"):

        class HandWritten(MultiAgentEnv):
            option_specs = {"width": S("int", low=1)}

            def __init__(self, width: int = 1): ...


def test_a_declaration_that_cannot_be_read_is_an_error_not_a_lost_range():
    def declared(self, width: Annotated[Missing, Option("w", low=1)] = 1): ...  # noqa: F821

    def plain(self, width: Missing = 1): ...  # noqa: F821

    with pytest.raises(TypeError, match="Option declarations of width cannot be read"):
        signature_options(declared)
    # A name only imported for type checkers, without a declaration: read as text.
    assert signature_options(plain)["width"].spec == S("any")


def test_an_option_needs_its_meaning():
    with pytest.raises(TypeError, match="meaning"):
        Option("", low=1)
    assert Option("a share", UNIT, high=0.5).spec == S("float", low=0.0, high=0.5)
