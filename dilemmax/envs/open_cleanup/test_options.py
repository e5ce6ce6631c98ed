"""OpenCleanup's protocol options: ``reveal`` lists the episode's recipes; ``role`` is item 1.5."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.conftest import hand_state, make_rule
from dilemmax.envs.osj.test_options import (
    check_reveal_is_off_by_default,
    check_roles_are_options_of_one_instance,
    hidden_block,
)


@pytest.mark.slow
def test_reveal_and_roles(env):
    state = hand_state(env)
    check_reveal_is_off_by_default(env, state)
    check_roles_are_options_of_one_instance(env, state)


def test_reveal_lists_every_recipe_of_the_episode(env):
    rule = make_rule(dark=(2, 1), mid=(3, 3), hue1=(2, 0))
    state = hand_state(env, rule)
    block = hidden_block(env, state)
    told = {
        C.pair_index(int(a), int(b)): does
        for a, b, does in re.findall(r"\[(\d), (\d)\] -> (.+)", block)
    }
    pair_effect = np.asarray(state.config.pair_effect)
    assert sorted(told) == sorted(np.flatnonzero(pair_effect != C.NO_EFFECT).tolist())
    assert told[C.pair_index(2, 1)].endswith("(dark -> mid)")
    assert told[C.pair_index(3, 3)].endswith("(mid -> light)")
    assert told[C.pair_index(2, 0)] == "clears Y0 (yellow-light) waste to water"
    for pair, does in told.items():
        effect = int(pair_effect[pair])
        if effect < C.NUM_HUES:
            light = f"{C.HUE_LETTERS[effect]}0 ({C.HUE_NAMES[effect]}-light)"
            assert does == f"clears {light} waste to water"
    assert block.endswith("Every other pick-up order does nothing to waste.")
