"""The teacher dataset: targets are the teacher's JAX actions, replies parse back to them, splits
are by episode, and everything follows from the seed."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict

import jax
import numpy as np
import pytest

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard import generator, policies
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.rollout import act
from dilemmax.finetune.conftest import SMALL_SPEC
from dilemmax.finetune.datasets import (
    build_records,
    decode_state,
    load_spec,
    move_line,
    prompt_of,
    protocol_for,
    sft_grid,
    split_of_episodes,
)
from dilemmax.finetune.rewards import score_records


def teacher_actions(num_agents: int, states) -> np.ndarray:
    """int32[B, n]: every seat's teacher action in each of a batch of states (one compile)."""
    env = MoralHazardEnv(num_agents)

    def actions(state):
        joint = act(
            env, [policies.teacher] * num_agents, jax.random.key(0), env.get_obs(state), state
        )
        return jax.numpy.stack([joint[a] for a in env.agents])

    return np.asarray(jax.jit(jax.vmap(actions))(states))


@pytest.mark.slow
def test_record_count_and_fields(small_records):
    # 4 conditions per n, 3 episodes, 3 stages x n agents (the teacher queries, so all post).
    assert len(small_records) == 4 * 3 * (3 * 2 + 3 * 3)
    first = small_records[0]
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert first["completion"][0]["role"] == "assistant"
    stages = {(r["num_agents"], r["stage"]) for r in small_records}
    assert stages == {(n, s) for n in (2, 3) for s in ("work", "note", "final")}


@pytest.mark.slow
def test_targets_are_the_teachers_actions_in_jax(small_records):
    for n in SMALL_SPEC.num_agents:
        records = [r for r in small_records if r["num_agents"] == n]
        states = [decode_state(r["state"], n) for r in records]
        batch = jax.tree.map(lambda *xs: np.stack(xs), *states)
        teacher = teacher_actions(n, batch)
        env = MoralHazardEnv(n)
        for record, state, joint in zip(records, states, teacher, strict=True):
            i = env.agent_index[record["agent"]]
            assert int(joint[i]) == record["target"]
            # and the teacher's moves are the cooperative ones on this very state
            stage = c.STAGE_NAMES.index(record["stage"])
            assert int(state.stage) == stage
            if stage == c.WORK:
                assert record["target"] == c.QUERY
            elif stage == c.NOTE:
                unsafe = int(state.config.unsafe[(i + 1) % n])
                assert record["target"] == c.note_action(1, unsafe)
            else:
                targets = np.asarray(
                    generator.target_options(state.config.utilities, state.config.unsafe)
                )
                assert record["target"] - c.FINAL_BASE == int(targets[i])


def test_replies_parse_to_the_target_with_full_reward(small_records):
    for record in small_records:
        protocol = protocol_for(record["num_agents"])
        parsed = protocol.parse_reply(record["completion"][0]["content"], prompt_of(record))
        assert parsed.valid, parsed.error
        assert parsed.action == record["target"]
    replies = [r["completion"][0]["content"] for r in small_records]
    means = score_records(small_records, replies)
    assert means == pytest.approx(
        {"format_reward": 0.05, "rationale_reward": 0.10, "target_reward": 0.85, "reward": 1.0}
    )


def test_prompts_are_what_the_protocol_renders(small_records):
    record = next(r for r in small_records if r["stage"] == "final" and r["num_agents"] == 3)
    state = decode_state(record["state"], 3)
    protocol = protocol_for(3, record["protocol"])
    prompt = protocol.turn(state, record["agent"], protocol.new_memory(record["agent"]))
    assert record["prompt"][0]["content"] == prompt.system
    assert record["prompt"][1]["content"] == prompt.user


def test_splits_are_by_episode(small_records):
    splits_of = defaultdict(set)
    for r in small_records:
        splits_of[(r["condition"], r["episode"])].add(r["split"])
    assert all(len(s) == 1 for s in splits_of.values())
    per_condition = defaultdict(list)
    for (condition, _), s in splits_of.items():
        per_condition[condition] += list(s)
    for names in per_condition.values():  # thirds of three episodes: one episode each
        assert sorted(names) == ["heldout", "train", "validation"]


def test_split_cut_by_fractions():
    names = split_of_episodes(21, (0.8, 0.1, 0.1), np.random.default_rng(0))
    assert [names.count(s) for s in ("train", "validation", "heldout")] == [17, 2, 2]


def test_same_seed_same_records_other_seed_other_cases(small_records):
    again = build_records(SMALL_SPEC)
    assert again == small_records
    other = build_records(SMALL_SPEC.__class__(**{**SMALL_SPEC.__dict__, "seed": 4}))
    assert [r["state"] for r in other] != [r["state"] for r in small_records]


@pytest.mark.parametrize(
    ("action", "agent", "n", "line"),
    [
        (c.QUERY, 0, 2, "ACTION QUERY"),
        (c.LOCAL_BASE + 2, 1, 2, "ACTION LOCAL C"),
        (c.NO_NOTE, 0, 3, "NO NOTE"),
        (c.note_action(1, 3), 2, 3, "NOTE CASE 1 UNSAFE D"),  # agent 3's successor is agent 1
        (c.FINAL_BASE + 1, 0, 4, "FINAL B"),
    ],
)
def test_move_line(action, agent, n, line):
    assert move_line(action, agent, n) == line


def test_load_spec_round_trips_and_gives_the_dataset_grid(tmp_path):
    # What `dilemmax finetune evaluate --conditions DATA` plays: the grid the data was drawn from.
    spec_dict = asdict(SMALL_SPEC)
    spec_dict["counts"] = {"train": 1}
    (tmp_path / "spec.json").write_text(json.dumps(spec_dict))
    spec = load_spec(tmp_path)
    assert spec == SMALL_SPEC
    grid = sft_grid(spec)
    assert sorted(grid) == [2, 3]
    assert grid[2].names == (
        "n=2 k=0.00 w_T=0.50 provenance=anonymous",
        "n=2 k=0.00 w_T=0.50 provenance=visible",
        "n=2 k=0.35 w_T=0.50 provenance=anonymous",
        "n=2 k=0.35 w_T=0.50 provenance=visible",
    )


def test_brief_records_are_shorter_and_parse_to_the_target(small_records):
    # The same episodes rendered with brief prompts (the compiled teacher program is reused).
    options = {**SMALL_SPEC.protocol_options, "brief": True}
    brief = build_records(
        SMALL_SPEC.__class__(**{**SMALL_SPEC.__dict__, "protocol_options": options})
    )
    assert [r["state"] for r in brief] == [r["state"] for r in small_records]
    assert [r["target"] for r in brief] == [r["target"] for r in small_records]
    for short, full in zip(brief, small_records, strict=True):
        chars = lambda r: sum(len(m["content"]) for m in r["prompt"])  # noqa: E731
        assert chars(short) < 0.5 * chars(full)
        protocol = protocol_for(short["num_agents"], short["protocol"])
        assert protocol.brief
        parsed = protocol.parse_reply(short["completion"][0]["content"], prompt_of(short))
        assert parsed.valid and parsed.action == short["target"], parsed.error
    replies = [r["completion"][0]["content"] for r in brief]
    assert score_records(brief, replies)["reward"] == pytest.approx(1.0)
