"""Env options and the one text-to-value parser: every bad value is refused at construction with
a message naming the option, the value and the allowed range (issue #11, "Env options")."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dilemmax
from dilemmax.envs.consequence.generator import count_splits
from dilemmax.envs.options import (
    ENV_OPTIONS,
    OptionError,
    OptionSpec,
    parse_env_options,
    parse_value,
)

NAN = float("nan")

# (env, option, value, words the message must contain): the values of issue #11 and more.
BAD_OPTIONS = [
    ("open_cleanup", "clean_reward", NAN, "[-100, 100]"),
    ("open_cleanup", "p_spawn", -1.0, "[0, 1]"),
    ("open_cleanup", "p_spawn", 2.0, "[0, 1]"),
    ("open_cleanup", "p_spawn", NAN, "[0, 1]"),
    ("open_cleanup", "skew", 5.0, "[0, 1]"),
    ("open_cleanup", "skew", NAN, "[0, 1]"),
    ("open_cleanup", "num_trials", 0, "1..100"),
    ("open_cleanup", "trial_steps", -400, "1..10000"),
    ("open_cleanup", "height", 100, "12..24"),
    ("open_cleanup", "height", 0, "12..24"),
    ("open_cleanup", "zap", "yes", "true or false"),
    ("open_harvest", "num_trials", -1, "1..100"),
    ("open_harvest", "trial_steps", 0, "1..10000"),
    ("open_harvest", "train_fraction", 1.0, "[0.01, 0.99]"),
    ("open_harvest", "split", "test", "'held_out'"),
    ("consequence", "num_rounds", 2.7, "1..64"),
    ("consequence", "sorted_agents", "no", "true or false"),
    ("consequence", "rules", [], "1..5 items"),
    ("consequence", "rules", ["XX"], "'RP'"),
    ("consequence", "total_resources", 3072, "2..1024"),
    ("consequence", "num_agents", True, "2..16"),
    ("moral_hazard", "cost", 1.5, "[0, 1]"),
    ("moral_hazard", "w_team", math.inf, "[0, 1]"),
    ("moral_hazard", "num_agents", 10, "2..9"),
    ("moral_hazard", "mapping", "middle", "'highest'"),
]


@pytest.mark.parametrize(("env_id", "name", "value", "allowed"), BAD_OPTIONS)
def test_bad_option_is_refused_naming_option_value_and_range(env_id, name, value, allowed):
    started = time.perf_counter()
    with pytest.raises(OptionError) as err:
        dilemmax.make(env_id, **{name: value})
    message = str(err.value)
    assert env_id in message and f"{name}=" in message and allowed in message
    assert repr(value)[:10] in message
    assert time.perf_counter() - started < 5  # refused before any pool or table is built


def test_consequence_context_table_is_bounded_jointly():
    # 1024 resources over 16 agents is within each range but enumerates far too many contexts.
    with pytest.raises(OptionError, match="contexts"):
        dilemmax.make("consequence", total_resources=1024, num_agents=16)
    with pytest.raises(OptionError, match=">= num_agents"):
        dilemmax.make("consequence", total_resources=3, num_agents=4)


def test_count_splits_matches_the_enumeration():
    from dilemmax.envs.consequence.generator import resource_splits

    for total, parts in [(12, 3), (7, 2), (5, 4), (1, 3)]:
        assert count_splits(total, parts) == len(resource_splits(total, parts))


def test_valid_options_pass_and_keep_their_meaning():
    env = dilemmax.make("consequence", sorted_agents=False, rules=["rp", 2], num_rounds=3)
    assert env.sorted_agents is False and env.rules == (3, 2) and env.max_steps == 5


def test_every_declared_option_is_a_constructor_argument():
    import inspect

    from dilemmax.envs.registry import env_spec

    for env_id, declared in ENV_OPTIONS.items():
        params = inspect.signature(env_spec(env_id).load().__init__).parameters
        assert set(declared) <= set(params), env_id


@pytest.mark.parametrize(
    ("text", "expected"),
    [("false", False), ("False", False), ("no", False), ("0", False), ("true", True), ("on", True)],
)
def test_bool_text_is_typed_by_the_option(text, expected):
    assert parse_env_options("consequence", {"sorted_agents": text}) == {"sorted_agents": expected}


def test_typed_parser_refuses_what_does_not_fit():
    with pytest.raises(OptionError, match="num_rounds='2.7'"):
        parse_env_options("consequence", {"num_rounds": "2.7"})
    with pytest.raises(OptionError, match="unknown option 'colour'"):
        parse_env_options("consequence", {"colour": "red"})
    assert parse_env_options("consequence", {"rules": "['RP', 'DV']"}) == {"rules": ["RP", "DV"]}
    assert parse_value("1e6", OptionSpec("int")) == 1_000_000
    assert parse_value("none", OptionSpec("int", optional=True)) is None
    with pytest.raises(OptionError):
        parse_value("none", OptionSpec("int"))
    with pytest.raises(OptionError, match="characters"):
        parse_value("9" * 20_000, OptionSpec("int"))
    assert parse_value("'RP'") == "RP" and parse_value("[1, 2]") == [1, 2]


SPECS = [
    OptionSpec("int", low=1, high=64),
    OptionSpec("float", low=0.0, high=1.0),
    OptionSpec("float", low=0.0, high=1.0, low_open=True),
    OptionSpec("bool"),
    OptionSpec("str", choices=("train", "held_out")),
    OptionSpec("list", min_len=1, item=OptionSpec("int", low=0)),
    OptionSpec("dict"),
    OptionSpec("int", optional=True),
    None,
]


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300), spec_index=st.integers(0, len(SPECS) - 1))
def test_parse_value_is_total_and_its_result_fits_the_spec(text, spec_index):
    spec = SPECS[spec_index]
    started = time.perf_counter()
    try:
        value = parse_value(text, spec, "x")
    except OptionError as err:
        assert "x" in str(err)
    else:
        if spec is not None:
            assert spec.check("x", value) == value
    assert time.perf_counter() - started < 0.5


@settings(max_examples=200, deadline=None)
@given(
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.lists(st.integers(-5, 5), max_size=4),
    ),
    spec_index=st.integers(0, len(SPECS) - 2),
)
def test_spec_check_accepts_or_raises_option_error_only(value, spec_index):
    spec = SPECS[spec_index]
    try:
        checked = spec.check("x", value)
    except OptionError:
        return
    if spec.kind == "float":
        assert math.isfinite(checked) and spec.low <= checked <= spec.high
    if spec.kind == "int" and checked is not None:
        assert isinstance(checked, int) and not isinstance(checked, bool)


def test_a_refused_value_is_quoted_short_whole_and_without_raising():
    """option_spec.shown, the one way an error message quotes what it refused: text cut inside
    its quotes, numbers as written, and neither a huge integer nor a failing repr raises."""
    import numpy as np

    from dilemmax.envs.option_spec import shown

    class Hostile:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert shown("abc") == "'abc'"
    assert shown("x" * 100, 20) == repr("x" * 17 + "...")  # the closing quote kept
    assert shown(np.float32(5)) == "5.0" and shown(7) == "7" and shown(None) == "None"
    assert shown(list(range(100)), 20) == "[0, 1, 2, 3, 4, 5..."
    assert shown(10**5000) == "<integer of 16610 bits>"
    assert shown(Hostile()) == "<Hostile>"
