"""RULES YOU KNOW comes from what the agent's own shot did, never from another beam's work."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dilemmax import make
from dilemmax.envs.loop import EpisodeLoop, StepHook
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.conftest import hand_state, make_rule
from dilemmax.envs.open_cleanup.ledger import own_beam_after
from dilemmax.envs.open_cleanup.test_text import play_step, reply

H, W = C.GRID_HEIGHT, C.GRID_WIDTH
G2 = C.WASTE_BASE + 2 * C.NUM_SHADES + C.DARK  # green-dark


@pytest.mark.slow
def test_two_beams_on_one_cell_each_record_their_own_effect(env):
    """A fires [2, 0] (the green cleaner: nothing on dark waste) and B fires [2, 1] (dark ->
    mid) at the same G2 in one step; the cell becomes G1. Only B's ledger says so."""
    grid = np.full((H, W), C.GROUND, np.uint8)
    grid[5, 8] = G2
    positions = [[6, 8], [6, 9], [8, 8]] + [[H - 1, 2 + 2 * i] for i in range(env.num_agents - 3)]
    window = [[2, 0], [2, 1]] + [[-1, -1]] * (env.num_agents - 2)
    rule = make_rule(hue2=(2, 0), dark=(2, 1))
    state = hand_state(env, rule, grid, positions, [0] * env.num_agents, window)
    protocol = env.text_protocol()
    memories = {a: protocol.new_memory(a) for a in env.agents}
    fire = {"agent_0": reply(C.FIRE_ACTION), "agent_1": reply(C.FIRE_ACTION)}
    after, _, _ = play_step(env, protocol, memories, state, fire)
    assert int(np.asarray(after.grid)[5, 8]) == G2 - 1  # B's beam lightened it
    a_rules = memories["agent_0"].ledger.block()
    b_rules = memories["agent_1"].ledger.block()
    assert a_rules.endswith("[2, 0] -> no effect on G2 (green-dark)")
    assert b_rules.endswith("[2, 1] -> turned G2 (green-dark) into G1 (green-mid)")
    assert memories["agent_0"].last_step.endswith("[2, 0]: (5, 8) G2 unchanged")
    # C watched both beams: A's shot hit waste and did nothing, B's lightened it.
    seen = memories["agent_2"].others
    assert (seen[0].no_effect_shots, dict(seen[0].effects)) == (1, {(G2, G2): 1})
    assert dict(seen[1].effects) == {(G2, G2 - 1): 1}
    assert own_beam_after(state.config.pair_effect, C.pair_index(2, 1), [G2, C.WALL]) == [
        G2 - 1,
        C.WALL,
    ]


def test_a_cell_two_beams_clear_counts_once_for_a_watcher(env):
    """A and B both fire the green cleaner at one G0: each ledger says it cleared it (the env
    credits both); C counts one cell cleared by others, and A none (it cleared it itself)."""
    grid = np.full((H, W), C.GROUND, np.uint8)
    grid[5, 8] = G2 - 2  # green-light
    positions = [[6, 8], [6, 9], [8, 8]] + [[H - 1, 2 + 2 * i] for i in range(env.num_agents - 3)]
    window = [[2, 0], [2, 0]] + [[-1, -1]] * (env.num_agents - 2)
    state = hand_state(env, make_rule(hue2=(2, 0)), grid, positions, [0] * env.num_agents, window)
    protocol = env.text_protocol()
    memories = {a: protocol.new_memory(a) for a in env.agents}
    fire = {"agent_0": reply(C.FIRE_ACTION), "agent_1": reply(C.FIRE_ACTION)}
    after, _, _ = play_step(env, protocol, memories, state, fire)
    assert int(np.asarray(after.grid)[5, 8]) == C.WATER
    for agent in ("agent_0", "agent_1"):
        assert (
            memories[agent].ledger.block().endswith("[2, 0] -> cleared G0 (green-light) to water")
        )
    assert memories["agent_2"].stats.cleared_by_others == 1
    assert memories["agent_0"].stats.cleared_by_others == 0


class _Ledgers(StepHook):
    """Every agent's memory follows every step (as a model seat's would), with the env's own
    per-agent counts of what each agent's beams cleared and lightened."""

    def __init__(self, env):
        self.env, self.protocol = env, env.text_protocol()
        self.memories = {a: self.protocol.new_memory(a) for a in env.agents}
        self.cleared = np.zeros(env.num_agents, int)
        self.lightened = np.zeros(env.num_agents, int)

    def observe(self, t, before, step, after, live) -> None:
        actions, _, _, infos = step
        state, next_state = jax.device_get(before.state), jax.device_get(after.state)
        for agent in self.env.agents:
            self.protocol.after_step(self.memories[agent], agent, state, actions, infos, next_state)
        self.cleared += np.asarray(infos["cleared"])
        self.lightened += np.asarray(infos["lightened"])


@pytest.fixture(scope="module")
def informed_team():
    """The reported case: five informed_cleaner seats, trial_steps=60, key 3."""
    env = make("open_cleanup", trial_steps=60)
    hook = _Ledgers(env)
    seats = [env.scripted_policies()["informed_cleaner"]] * env.num_agents
    EpisodeLoop(env, seats).play(jax.random.PRNGKey(3), hook=hook)
    return env, hook


@pytest.mark.slow
def test_the_reported_case_credits_no_other_agents_work(informed_team):
    env, hook = informed_team
    a_rules = hook.memories["agent_0"].ledger.block()
    (a_line,) = [line for line in a_rules.splitlines() if line.startswith("[2, 0] ->")]
    # [2, 0] is this episode's yellow cleaner: it clears yellow-light and does nothing else,
    # although other agents lightened the cells under A's beam in the same steps.
    assert a_line.startswith("[2, 0] -> cleared Y0 (yellow-light) to water (")
    assert "turned" not in a_line


@pytest.mark.slow
def test_every_ledger_adds_up_to_the_envs_own_counts(informed_team):
    env, hook = informed_team
    for i, agent in enumerate(env.agents):
        effects = hook.memories[agent].ledger.effects
        to_water = lightened = 0
        for by_code in effects.values():
            for before, after in by_code.items():
                to_water += after[C.WATER]
                lightened += sum(
                    n for code, n in after.items() if code == before - 1 and code != C.WATER
                )
        assert (to_water, lightened) == (hook.cleared[i], hook.lightened[i]), agent
        # Each order the agent fired with changes waste in at most one way (its one effect).
        for by_code in effects.values():
            kinds = {
                "clear" if a == C.WATER else "lighten"
                for b, after in by_code.items()
                for a in after
                if a != b
            }
            assert len(kinds) <= 1, agent
    assert hook.cleared.sum() > 0 and hook.lightened.sum() > 0
