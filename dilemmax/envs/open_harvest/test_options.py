"""OpenHarvest's protocol options: ``reveal`` gives the pay table and regrowth multipliers of the
map's colours; ``role`` is item 1.5."""

from __future__ import annotations

import re

import numpy as np

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.osj.test_options import (
    check_reveal_is_off_by_default,
    check_roles_are_options_of_one_instance,
    hidden_block,
)


def test_reveal_and_roles(env, hand_state):
    check_reveal_is_off_by_default(env, hand_state)
    check_roles_are_options_of_one_instance(env, hand_state)


def test_reveal_gives_the_pay_table_and_regrowth_of_the_map_colours(env, hand_state):
    config = hand_state.config
    block = hidden_block(env, hand_state)
    pay, multiplier = np.asarray(config.pay), np.asarray(config.regrowth_multiplier)
    colours = sorted(set(np.asarray(config.patch_colours).tolist()))
    rows = [line for line in block.splitlines() if line.split(":")[0] in c.COLOUR_NAMES]
    assert [c.COLOUR_NAMES.index(row.split(":")[0]) for row in rows] == colours == [0, 1, 2, 3, 4]
    for row, colour in zip(rows, colours, strict=True):
        found = re.findall(r"(unripe|ripe|over-ripe) pays ([\d.]+), .*? regrows x([\d.]+)", row)
        assert [(name, float(p), float(m)) for name, p, m in found] == [
            (name, float(pay[colour, g]), float(multiplier[colour, g]))
            for g, name in enumerate(c.STAGE_NAMES)
        ]
    # Every pay level and multiplier appears once per colour (permutations of the levels).
    assert sorted(pay[0].tolist()) == sorted(c.PAY_LEVELS)
