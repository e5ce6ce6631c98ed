"""Scoring populations on scenario sets, and the zoo's names, digests and loading."""

import json

import jax
import numpy as np
import pytest

from dilemmax.agents import zoo
from dilemmax.envs.policies import policies_for
from dilemmax.envs.rollout import is_carried
from dilemmax.errors import UsageError
from dilemmax.scenarios import evaluate as E
from dilemmax.scenarios.registry import SETS
from dilemmax.statistics import t95, t_interval


def test_t_interval_and_normalised_score_by_hand():
    mean, low, high = t_interval(np.array([1.0, 2.0, 3.0, 4.0]))
    half = 3.182 * np.std([1, 2, 3, 4], ddof=1) / 2  # t(3) * sd / sqrt(4)
    assert mean == 2.5 and low == pytest.approx(2.5 - half) and high == pytest.approx(2.5 + half)
    assert t95(11) == t95(10) == 2.228 and t95(100) == 1.96
    assert E.normalised(5.0, random=1.0, best=9.0) == 0.5
    assert E.normalised(1.0, 1.0, 1.0) is None


@pytest.fixture(scope="module")
def moral_hazard_scores(built):
    """population -> its scores on moral_hazard/test (16 episodes, key 0), each scored once for
    the module when a test first asks for it: one compiled program per population."""
    env = built("moral_hazard/test")
    choices = policies_for(env.game)
    policies = {
        "teacher": choices["teacher"],
        "random_control": choices["random_control"],
        "random": E.random_policy,
    }
    scores = {}

    def get(name):
        if name not in scores:
            scores[name] = E.score_policy(
                SETS["moral_hazard/test"], policies[name], jax.random.key(0), 16, env
            )
        return scores[name]

    return get


@pytest.mark.slow
def test_moral_hazard_partner_who_never_queries_costs_the_cooperative_focal_agent(
    built, moral_hazard_scores
):
    """Against a partner who never queries, only the focal agent's own query can warn anyone:
    the teacher (queries, warns, reads the board) beats the random control there. As the only
    reference population the teacher scores exactly 1 and random exactly 0."""
    env = built("moral_hazard/test")
    teacher = moral_hazard_scores("teacher")
    control = moral_hazard_scores("random_control")
    assert [r.scenario for r in teacher] == list(env.names)
    for t, c in zip(teacher, control, strict=True):
        assert t.episodes == 16 and t.digest == c.digest and t.ci_low <= t.mean <= t.ci_high
    assert teacher[0].scenario == "moral_hazard/never_queries" and teacher[0].mean > control[0].mean
    # The references from the scores already computed (E.references would score both again).
    uniform = moral_hazard_scores("random")
    refs = E.references_from({"random": uniform, "teacher": teacher})
    rows = E.summary_rows(teacher, refs)
    assert rows[0]["best_population"] == "teacher" and rows[0]["normalised"] == pytest.approx(1.0)
    random_rows = E.summary_rows(uniform, refs)
    for r in rows:  # the best population scores 1, uniform random 0 (a tie: no score)
        want = 1.0 if r["best_population"] == "teacher" else None
        assert want is None or r["normalised"] == pytest.approx(want)
    assert random_rows[0]["normalised"] == pytest.approx(0.0)
    table = E.summary_table(rows)
    assert table.splitlines()[0] == "| " + " | ".join(E.SUMMARY_COLUMNS) + " |"
    assert len(table.splitlines()) == 2 + len(rows)


@pytest.mark.slow
def test_references_of_a_changed_scenario_are_refused(tmp_path, moral_hazard_scores):
    rows = moral_hazard_scores("random")  # the uniform scores the test above reads too
    refs = {rows[0].scenario: {"random": 0.0, "best": 1.0, "best_population": "x", "digest": "old"}}
    with pytest.raises(ValueError, match="another version"):
        E.summary_rows(rows, refs)
    path = E.summary_plot(E.summary_rows(rows, {}), tmp_path / "plot.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def _fake_zoo(tmp_path, run_files: dict[str, str], digest: str | None = None):
    run = tmp_path / "consequence" / "ippo"
    (run / "checkpoints").mkdir(parents=True)
    for name, text in run_files.items():
        (run / name).write_text(text)
    entry = {"run": "consequence/ippo", "seed": 1, "digest": digest or zoo.run_digest(run)}
    (tmp_path / zoo.MANIFEST).write_text(json.dumps({"consequence/ippo_s1": entry}))
    return run


def test_zoo_names_resolve_verify_and_refuse(tmp_path):
    run = _fake_zoo(tmp_path, {"config.json": "{}"})
    assert zoo.names(tmp_path) == ["consequence/ippo_s1"]
    assert zoo.verify("consequence/ippo_s1", tmp_path) == run
    for bad in ("consequence/ippo_s9", "../../etc", "", "x" * 500):
        with pytest.raises(UsageError, match="not in the zoo"):
            zoo.resolve(bad, tmp_path)
    (run / "config.json").write_text('{"changed": 1}')
    with pytest.raises(UsageError, match="do not match"):
        zoo.verify("consequence/ippo_s1", tmp_path)
    (tmp_path / zoo.MANIFEST).write_text("[not json")
    with pytest.raises(UsageError, match="unreadable"):
        zoo.manifest(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("game", sorted({e["game"] for e in zoo.manifest().values()}))
def test_every_shipped_zoo_population_loads_and_plays(game):
    """Every population of the shipped zoo matches its digest and loads against its game; each
    acts legally on the game's first observations, and the first plays a whole episode."""
    from dilemmax.envs.registry import make
    from dilemmax.envs.rollout import observations_for, run_episodes

    env = make(game)
    names = [n for n, e in sorted(zoo.manifest().items()) if e["game"] == game]
    # One program for the first observations (run op by op, a grid game's reset compiles a
    # hundred small ones).
    views = jax.jit(lambda k: observations_for(env, *env.reset(k)))(jax.random.key(0))
    for name in names:
        policy = zoo.load(name, env=env, greedy=True)
        act = jax.jit(lambda k, v, p=policy: _act(p, k, v))
        for agent, view in views.items():
            action = int(act(jax.random.key(1), view))
            assert bool(view.mask[action]), (name, agent, action)
    if env.max_steps <= 10:  # a whole episode where one is a few steps (the grid games: 2,000)
        _, metrics = run_episodes(env, zoo.load(names[-1], env=env), jax.random.key(0), 2)
        assert np.all(np.isfinite(np.asarray(metrics["return"])))


def _act(policy, key, view):
    if is_carried(policy):  # a recurrent population acts from its episode-start memory
        return policy.step(policy.initial_carry(), key, view)[0]
    return policy(key, view)
