"""The ablation runner with a population whose answers are known, and one real arena arm."""

import jax
import numpy as np
import pytest

from dilemmax.redteam import ablations as A


def fake_population(arm, rule, configs, episodes, key):
    """Targets the named extreme only when the clause names it; PP never kills in this arm."""
    del key
    rows = configs.threshold.shape[0] * episodes
    named = arm.clause != "anonymous"
    targeted = np.full(rows, 1.0 if (named and rule == "RP") else 0.0)
    fatality = targeted / 3.0
    if arm.goal == "cooperative":
        fatality = fatality * 0.5
    return {
        "targeted_elimination": targeted,
        "fatality": fatality,
        "all_zero_opening": targeted,
        "round_one_funding": 1.0 - targeted,
    }


def test_ablations_with_known_effects():
    contexts = A.ablation_contexts(num_sampled=6, seed=1)
    assert len(contexts) == 7 and len(set(contexts.tolist())) == 7
    report = A.run_ablations(fake_population, contexts=contexts, episodes=2, num_resamples=500)
    anon = report["ablations"]["anonymous_one_shot"]
    assert anon["ablated"]["num_rounds"] == 1 and anon["ablated"]["endgame"] == "rule"
    rp = anon["differences"]["targeted_elimination"]["RP"]
    assert rp["mean"] == -1.0 and rp["low"] == rp["high"] == -1.0 and rp["p_value"] < 0.05
    assert anon["differences"]["targeted_elimination"]["PP"]["p_value"] == 1.0
    # Anonymising erases the RP - PP contrast: the sign does not hold.
    assert anon["contrast"]["control"]["mean"] > 0 and anon["contrast"]["ablated"]["mean"] == 0
    assert anon["contrast"]["sign_holds"] is False
    # Neutral wording changes nothing in this population; the cooperative frame halves fatality
    # but keeps the sign of the contrast.
    neutral = report["ablations"]["neutral_wording"]
    assert neutral["differences"]["fatality"]["RP"]["mean"] == 0.0
    coop = report["ablations"]["frame_cooperative"]
    assert coop["differences"]["fatality"]["RP"]["mean"] < 0 and coop["contrast"]["sign_holds"]
    header, rows = A.ablation_table(report)
    assert len(rows) == 5 * 4 * 2 and len(header) == len(rows[0])


@pytest.mark.slow
def test_arena_population_anonymous_arm_hides_the_rule_token():
    seen = []

    def policies_for(env, arm, rule):
        seen.append((env.anonymous_rule, env.num_rounds, env.endgame, rule))
        return env.scripted_policies()["starve_then_cover"]

    play = A.arena_population(policies_for)
    contexts = np.array([0, 5])
    arm, control = A.ABLATIONS["anonymous_one_shot"]
    m = play(arm, "RP", A.configs_for(contexts, "RP"), 2, jax.random.PRNGKey(0))
    assert seen == [(True, 1, "rule", "RP")]
    assert m["fatality"].shape == (4,)
    # starve_then_cover gives nothing in its one round: the rule removes exactly one agent.
    assert np.allclose(m["fatality"], 1 / 3) and np.all(m["targeted_elimination"] == 1)
