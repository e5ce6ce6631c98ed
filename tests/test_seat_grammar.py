"""One seat grammar (issue #36): the same seat spellings are accepted by every place that seats
a policy, and a wrong one is refused with the same one-line message everywhere.

The places: ``dilemmax rollout``, ``play``, ``experiment``, ``scenarios evaluate`` (focal
populations and scenario backgrounds), Inspect tasks' ``seats``, training partners, the
Gymnasium single-seat view, the arena and the Python API (:func:`resolve_seat`). A model seat
plays where a model can (rollout, play, experiment, a focal population); the places that seat
only policies that act inside JAX (backgrounds, training partners, Gymnasium) and Inspect (where
a model is a role) refuse it in one line that says so. The parser itself is fuzzed: any text
gives a :class:`SeatSpec` or a one-line UsageError, never another exception.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dilemmax
from dilemmax.agents.arena import Arena
from dilemmax.cli import main
from dilemmax.envs.option_declaration import setting
from dilemmax.envs.rollout import is_jittable
from dilemmax.envs.seat_spec import (
    SeatSpec,
    SeatSpecError,
    check_seat,
    parse_seat,
    resolve_seat,
    seat_kinds,
)
from dilemmax.errors import UsageError
from dilemmax.experiments import catalogue, registry
from dilemmax.experiments.design import Design, DesignParams, Part, Plan, Report
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.test_cli import fake_trained_run
from dilemmax.scenarios.spec import Scenario, ScenarioSet
from dilemmax.train.configure import make_config
from dilemmax.train.learners import Seats
from dilemmax.wrappers.gymnasium import SingleSeatEnv

GAME = "moral_hazard"  # the cheapest game to compile, with trained zoo populations
ZOO = "zoo:moral_hazard/ippo_s0"


def reply(body) -> str:
    """A planted model: keeps the local opportunity, posts no note, picks the first final."""
    text = body["messages"][-1]["content"]
    if "(work)" in text or "| WORK" in text:
        return "ACTION LOCAL B"
    if "(note)" in text or "| NOTE" in text:
        return "NO NOTE"
    return "FINAL A"


@pytest.fixture(scope="module")
def env():
    return dilemmax.make(GAME)


@pytest.fixture(scope="module")
def server():
    with LocalChatServer(reply) as running:
        yield running


@pytest.fixture(scope="module")
def spellings(tmp_path_factory, server) -> dict[str, str]:
    """name -> one spelling of every seat kind (and option form) a user writes."""
    run = fake_trained_run(tmp_path_factory.mktemp("seats") / "run")
    return {
        "bare": "teacher",
        "scripted": "scripted:teacher",
        "trained": f"trained:{run}",
        "trained_options": f"trained:{run},seed=0,greedy",
        "zoo": ZOO,
        "zoo_greedy": f"{ZOO},greedy",
        "openai": f"openai:m,base_url={server.base_url}",
    }


def jax_seats(spellings) -> dict[str, str]:
    return {k: v for k, v in spellings.items() if k != "openai"}


BAD = [  # spec, what the one line names
    ("scripted:nope", "no scripted policy 'nope'"),
    ("nope", "has no kind"),
    ("bogus:x", "unknown seat kind 'bogus'"),
    ("trained:/no/such/run", "no such run folder"),
    ("trained:/no/such/run,sed=3", "['sed'] are not known"),
    ("zoo:moral_hazard/nope", "not in the zoo"),
    (f"{ZOO},greedy=1", "greedy takes no value"),
    ("openai:m,temperature=9", "temperature='9'"),
]


def the_message(spec: str, env) -> str:
    """The one line the Python API refuses ``spec`` with: every command must say the same."""
    with pytest.raises(UsageError) as error:
        check_seat(spec, env)
    message = str(error.value)
    assert "\n" not in message
    return message


def cli_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


# --------------------------------------------------------------------------- the parser
WORD = st.text(alphabet=string.ascii_letters + string.digits + "_-./:=|é \n", max_size=12)
NEAR_SPECS = st.builds(  # near-valid specs: every kind, its options and junk, in any order
    lambda kind, target, options: ",".join([f"{kind}:{target}", *options]),
    st.sampled_from(["scripted", "trained", "zoo", "openai", "inspect", "hf", "bogus", ""]),
    WORD,
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "greedy",
                    "seed=3",
                    "seed=-1",
                    "temperature=0.5",
                    "top_k=0",
                    "base_url=http://a/v1|http://b/v1",
                    "role=cooperator",
                    "adapter=",
                    "output=xml",
                    "greedy=1",
                    "=",
                    "",
                ]
            ),  # fmt: skip
            st.builds(lambda a, b: f"{a}={b}", WORD, WORD),
        ),
        max_size=4,
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(alphabet=string.printable + "é|:=,", max_size=60), NEAR_SPECS))
def test_the_parser_is_total_any_text_is_a_spec_or_one_line(text):
    try:
        spec = parse_seat(text)
    except UsageError as error:
        assert "\n" not in str(error) and str(error)
        return
    assert isinstance(spec, SeatSpec) and spec.kind in seat_kinds() and spec.target


PART = st.text(alphabet=string.ascii_letters + string.digits + "_-.", min_size=1, max_size=12)
TARGET = st.builds(lambda a, b: f"{a}/{b}", PART, PART)  # every kind's target, zoo's included


@settings(max_examples=100, deadline=None)
@given(
    kind=st.sampled_from(["scripted", "trained", "zoo", "openai"]),
    target=TARGET,
    seed=st.integers(0, 2**31 - 1),
    greedy=st.booleans(),
    temperature=st.floats(0.0, 2.0),
)
def test_what_a_spec_says_is_what_it_parses_to(kind, target, seed, greedy, temperature):
    options = {
        "scripted": {},
        "trained": {"seed": seed, **({"greedy": True} if greedy else {})},
        "zoo": {"greedy": True} if greedy else {},
        "openai": {"temperature": temperature},
    }[kind]
    written = ",".join(
        [f"{kind}:{target}", *(k if v is True else f"{k}={v!r}" for k, v in options.items())]
    )
    spec = parse_seat(f"  {written} ")
    assert (spec.kind, spec.target, dict(spec.options), spec.text) == (
        kind, target, options, written
    )  # fmt: skip
    assert parse_seat(target.replace("/", "_")).kind == "scripted"  # a bare name: scripted


# --------------------------------------------------------------------------- the Python API
@pytest.mark.slow
def test_the_python_api_and_the_arena_seat_every_spelling(env, spellings):
    for name, spec in spellings.items():
        policy = resolve_seat(spec, env)
        assert is_jittable(policy) == (name != "openai"), name
    seats = {"agent_0": spellings["zoo_greedy"], "agent_1": spellings["openai"]}
    result = Arena(env, seats).run(jax.random.key(0), 1)
    assert set(result.metrics) >= {"return"}
    for spec, words in BAD:
        assert words in the_message(spec, env)


# --------------------------------------------------------------------------- the commands
def pairs(spellings) -> list[tuple[str, str]]:
    """The spellings two by two (one command seats two of them, to compile fewer programs)."""
    specs = list(spellings.values())
    return list(zip(specs[::2], [*specs[1::2], "teacher"], strict=True))


@pytest.mark.slow
def test_rollout_seats_every_spelling(env, spellings, capsys, tmp_path):
    for first, second in pairs(spellings):
        out = tmp_path / "summary.json"
        argv = ["rollout", GAME, "--seat", f"agent_0={first}", "--seat", f"agent_1={second}",
                "--episodes", "1", "--json", str(out)]  # fmt: skip
        assert main(argv) == 0, (first, second)
        assert "return" in json.loads(out.read_text())
    capsys.readouterr()
    for spec, _ in BAD:
        err = cli_error(capsys, ["rollout", GAME, "--seat", f"agent_1={spec}", "--episodes", "1"])
        assert the_message(spec, env) in err


@pytest.mark.slow
def test_play_seats_every_spelling(env, spellings, capsys, tmp_path):
    for first, second in pairs(spellings):
        out = tmp_path / "play.json"
        argv = ["play", GAME, "--seat", f"agent_0={first}", "--seat", f"agent_1={second}",
                "--episodes", "1", "--envs", "1", "--no-progress", "--json", str(out)]  # fmt: skip
        assert main(argv) == 0, (first, second)
        summary = json.loads(out.read_text())["summary"]["all"]
        assert f"return[{first}]" in summary and f"return[{second}]" in summary
    capsys.readouterr()
    for spec, _ in BAD:
        argv = ["play", GAME, "--seat", f"agent_1={spec}", "--seats", "teacher", "--no-progress"]
        assert the_message(spec, env) in cli_error(capsys, argv)


@dataclass(frozen=True)
class OneEpisode(DesignParams):
    episodes: int = setting(1, "episodes of its one part")


@pytest.mark.slow
def test_experiment_seats_every_spelling(env, spellings, capsys, tmp_path, monkeypatch):
    """A design of this test's own: one part with agent_1 fixed, agent_0 the user's --seats."""

    def plan(params, run) -> Plan:
        return Plan([Part("one", env, seats={"agent_1": "teacher"}, episodes=params.episodes)])

    design = Design("moral_hazard/seats", "test", "a seat", OneEpisode, plan, lambda *a: Report({}))
    entry = catalogue.Entry(design.name, design.section, design.summary, 1)
    monkeypatch.setattr(registry, "designs", lambda: {design.name: design})
    monkeypatch.setattr(catalogue, "entries", lambda: {design.name: entry})
    for name, spec in spellings.items():
        argv = ["experiment", design.name, "--seats", spec, "--envs", "1", "--no-progress",
                "--out", str(tmp_path / name)]  # fmt: skip
        assert main(argv) == 0, spec
        assert json.loads((tmp_path / name / "results.json").read_text())
    capsys.readouterr()
    for spec, _ in BAD:
        argv = ["experiment", design.name, "--seats", spec, "--no-progress",
                "--out", str(tmp_path / "bad")]  # fmt: skip
        assert the_message(spec, env) in cli_error(capsys, argv)


@pytest.mark.slow
def test_scenario_focal_populations_take_every_spelling(env, spellings, capsys, tmp_path):
    """Every JAX spelling resolves as the focal population of a scenario set; one of them, a
    model (through the batched harness) and an old-style --run play the set from the CLI."""
    from dilemmax.scenarios.focal import focal_policy
    from dilemmax.scenarios.registry import scenario_set

    scenario_env = scenario_set(GAME, "train").build()
    for spec in jax_seats(spellings).values():
        assert is_jittable(focal_policy(spec, scenario_env, GAME)), spec
    common = ["scenarios", "evaluate", "--game", GAME, "--scenario-set", "train",
              "--episodes", "1", "--references", "none"]  # fmt: skip
    for spec in (spellings["zoo_greedy"], spellings["openai"]):
        out = tmp_path / "focal.json"
        assert main([*common, "--focal", spec, "--json", str(out)]) == 0, spec
        assert json.loads(out.read_text())["rows"]
    capsys.readouterr()
    for spec, _ in BAD:
        assert the_message(spec, env) in cli_error(capsys, [*common, "--focal", spec])
    # The flags from before --focal still work (a one-line deprecation after the results).
    run = spellings["trained"].partition(":")[2]
    assert main([*common, "--run", f"{run},seed=0"]) == 0
    err = capsys.readouterr().err
    assert f"deprecated: scenarios evaluate --run is now --focal trained:{run},seed=0" in err


def test_scenario_backgrounds_take_every_jax_spelling(env, spellings):
    def scenario_set(spec):
        scenario = Scenario(f"{GAME}/s", GAME, {}, (0,), {1: spec}, "")
        return ScenarioSet(f"{GAME}/x", (scenario,))

    for spec in jax_seats(spellings).values():
        assert scenario_set(spec).build().num_scenarios == 1
    with pytest.raises(UsageError, match="scenario backgrounds play inside JAX"):
        scenario_set(spellings["openai"]).build()
    for spec, _ in BAD:
        with pytest.raises(UsageError) as error:
            scenario_set(spec).build()
        assert the_message(spec, env) in str(error.value)


def test_inspect_task_seats_take_every_jax_spelling(env, spellings):
    pytest.importorskip("inspect_ai")
    from dilemmax.evals import plans
    from dilemmax.evals.tasks import plan_task

    plan = plans.game_plan(GAME)
    for spec in jax_seats(spellings).values():
        task = plan_task(plan, "seats", seats=f"agent_1={spec}")
        assert task.dataset[0].metadata["seats"]["agent_1"] == spec
    with pytest.raises(UsageError, match="--model-role seat_1="):  # a model is a role there
        plan_task(plan, "seats", seats=f"agent_1={spellings['openai']}")
    for spec, _ in BAD:
        with pytest.raises(UsageError) as error:
            plan_task(plan, "seats", seats=f"agent_1={spec}")
        assert the_message(spec, env) in str(error.value)


@pytest.mark.slow
def test_training_partners_take_every_jax_spelling(env, spellings):
    def seats(spec):
        return Seats(env, make_config(GAME, overrides={"learners": [0], "partner_policy": spec}))

    for spec in jax_seats(spellings).values():
        assert callable(seats(spec).partner_fn)
    partner = seats(spellings["zoo_greedy"])

    @jax.jit  # a trained partner acts in the trainer's batched step (one program, not eagerly)
    def batched_step(key):
        obs, state = jax.vmap(env.reset)(jax.random.split(key, 2))
        masks = jax.vmap(env.action_mask)(state)
        return partner.actions(key, jnp.zeros((1, 2), jnp.int32), obs, masks, state)[0]

    assert batched_step(jax.random.key(0))["agent_1"].shape == (2,)
    with pytest.raises(UsageError, match="training partners play inside JAX"):
        seats(spellings["openai"])
    with pytest.raises(UsageError, match="keeps a memory"):  # a recurrent run: refused
        seats("zoo:moral_hazard/rl2_s0")
    for spec, _ in BAD:
        with pytest.raises(UsageError) as error:
            seats(spec)
        assert the_message(spec, env) in str(error.value)


def test_the_gymnasium_view_seats_every_jax_spelling(env, spellings):
    for spec in jax_seats(spellings).values():
        assert SingleSeatEnv(GAME, others=spec).agent == "agent_0"
    view = SingleSeatEnv(GAME, others={"agent_1": spellings["trained_options"]})
    _, info = view.reset(seed=0)
    view.step(int(np.flatnonzero(info["action_mask"])[0]))  # the trained seat acts in the step
    with pytest.raises(SeatSpecError, match="other seats play inside JAX"):
        SingleSeatEnv(GAME, others=spellings["openai"])
    with pytest.raises(SeatSpecError, match="keeps a memory"):  # a recurrent run: refused
        SingleSeatEnv(GAME, others="zoo:moral_hazard/rl2_s0")
    for spec, _ in BAD:
        with pytest.raises(UsageError) as error:
            SingleSeatEnv(GAME, others={"agent_1": spec})
        assert the_message(spec, env) in str(error.value)


@pytest.mark.slow
def test_the_readme_zoo_example_plays(capsys):
    """README: ``dilemmax play open_cleanup ... --seat agent_3=zoo:open_cleanup/ippo_s0``."""
    argv = ["play", "open_cleanup", "--seat", "agent_3=zoo:open_cleanup/ippo_s0",
            "--seats", "scripted:greedy", "--episodes", "1", "--envs", "1", "--max-steps", "3",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert "zoo:open_cleanup/ippo_s0" in capsys.readouterr().out
