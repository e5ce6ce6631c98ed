"""Harness-side cost of each game's text protocol per agent-step (client excluded).

For every game, plays episodes through the play interface with a scripted reply (a random legal
move in the game's reply format) and times, per agent-step that asks a model:

- ``turn``: building the prompt (memory blocks, view, actions);
- ``parse``: ``parse_reply`` on the reply;
- ``bookkeeping``: ``after_reply`` + ``after_step`` (memory updates; reflection prompts).

The env itself is stepped by a jitted ``step_env`` outside the timers. The state is handed to
the protocol as numpy leaves (``jax.device_get`` once per step, as a harness playing a batch
would do) and, for comparison, as jax arrays. Target (issue #10): turn + parse under 2 ms.

    python benchmarks/text_protocol_overhead.py [--steps 60] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np

from dilemmax.envs.consequence.env import ConsequenceEnv
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.open_cleanup.env import OpenCleanupEnv
from dilemmax.envs.open_harvest.env import OpenHarvestEnv
from dilemmax.envs.text import NoReply


def scripted_reply(game: str, prompt, rng) -> str:
    """A plausible reply naming a random legal move, in the game's own format."""
    action = int(rng.choice(prompt.legal))
    if game in ("open_cleanup", "open_harvest"):
        mode = "explore" if game == "open_cleanup" else "harvest"
        goal_type = "move_to"
        return json.dumps(
            {
                "why_this_move": "A scripted reply of typical length. " * 4,
                "mode": mode,
                "goal": {"type": goal_type, "cell": [3, 4], "why": "benchmark"},
                "note": {"op": "add", "id": 0, "text": "a note"} if rng.random() < 0.1 else
                        {"op": "none", "id": 0, "text": ""},
                "action": action,
            }
        )  # fmt: skip
    if game == "consequence":
        if prompt.context.get("vote"):
            return "They hold the most.\nVOTE: " + "ABC"[action]
        return f"I pay my share.\nCONTRIBUTION: {action}"
    from dilemmax.envs.moral_hazard import constants as c

    stage = prompt.context["stage"]
    if stage == c.WORK:
        return "Reasoning.\n" + ("ACTION QUERY" if action == c.QUERY else
                                 f"ACTION LOCAL {c.LABELS[action - c.LOCAL_BASE]}")  # fmt: skip
    if stage == c.NOTE:
        return "NO NOTE"
    return f"Reasoning.\nFINAL {c.LABELS[action - c.FINAL_BASE]}"


def measure(game: str, env, steps: int, numpy_state: bool, seed: int = 0) -> dict:
    protocol = env.text_protocol()
    step = jax.jit(env.step_env)
    reset = jax.jit(env.reset)
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    _, state = reset(key)
    memories = {a: protocol.new_memory(a) for a in env.agents}
    times = {"turn": [], "parse": [], "bookkeeping": []}
    played = 0
    while played < steps:
        view = jax.device_get(state) if numpy_state else state
        actions = {}
        for agent in env.agents:
            t0 = time.perf_counter()
            prompt = protocol.turn(view, agent, memories[agent])
            t1 = time.perf_counter()
            if isinstance(prompt, NoReply):
                actions[agent] = prompt.action
                continue
            reply = scripted_reply(game, prompt, rng)
            t2 = time.perf_counter()
            parsed = protocol.parse_reply(reply, prompt)
            t3 = time.perf_counter()
            protocol.after_reply(memories[agent], agent, prompt, reply, parsed)
            t4 = time.perf_counter()
            times["turn"].append(t1 - t0)
            times["parse"].append(t3 - t2)
            times["bookkeeping"].append(t4 - t3)
            actions[agent] = parsed.action
        key, sub = jax.random.split(key)
        _, nxt, _, dones, infos = step(sub, state, {a: np.int32(v) for a, v in actions.items()})
        nxt_view = jax.device_get(nxt) if numpy_state else nxt
        infos = jax.device_get(infos) if numpy_state else infos
        t0 = time.perf_counter()
        for agent in env.agents:
            for ask in protocol.after_step(memories[agent], agent, view, actions, infos, nxt_view):
                reply = '{"lessons": ["keep going"], "plans": ["clean first"]}'
                protocol.after_reply(memories[agent], agent, ask, reply,
                                     protocol.parse_reply(reply, ask))  # fmt: skip
        per_agent = (time.perf_counter() - t0) / env.num_agents
        times["bookkeeping"][-len(env.agents):] = [
            b + per_agent for b in times["bookkeeping"][-len(env.agents):]
        ]  # fmt: skip
        state = nxt
        played += 1
        if bool(np.asarray(dones["__all__"])):
            for agent in env.agents:
                protocol.after_episode(memories[agent], agent, nxt_view)
            key, sub = jax.random.split(key)
            _, state = reset(sub)
            memories = {a: protocol.new_memory(a) for a in env.agents}
    ms = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
    ms["turn+parse"] = ms["turn"] + ms["parse"]
    ms["calls"] = len(times["turn"])
    return ms


GAMES = {
    "moral_hazard": lambda: MoralHazardEnv(2),
    "consequence": lambda: ConsequenceEnv(),
    "open_cleanup": lambda: OpenCleanupEnv(num_layouts=16, num_rules=500),
    "open_harvest": lambda: OpenHarvestEnv(num_layouts=16, num_rules=64),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="env steps per game")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/")
    args = parser.parse_args()
    load = os.getloadavg()
    rows = []
    for game, make in GAMES.items():
        env = make()
        for numpy_state in (True, False):
            ms = measure(game, env, args.steps, numpy_state)
            rows.append(
                f"| {game} | {'numpy' if numpy_state else 'jax'} | {ms['calls']} | "
                f"{ms['turn']:.3f} | {ms['parse']:.3f} | {ms['bookkeeping']:.3f} | "
                f"**{ms['turn+parse']:.3f}** |"
            )
            print(rows[-1], flush=True)
    table = "\n".join(
        [
            "| game | state leaves | model calls | turn (ms) | parse (ms) | bookkeeping (ms) | "
            "turn + parse (ms) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
            *rows,
        ]
    )
    note = (
        f"Medians per agent-step that asks a model, {args.steps} env steps per game; "
        f"load average at start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on the shared "
        "2-core CPU (measured under load: upper bounds)."
    )
    print("\n" + table + "\n\n" + note)
    if args.write:
        os.makedirs("benchmarks/results", exist_ok=True)
        with open("benchmarks/results/text_protocol_overhead.md", "w") as f:
            f.write("# Text protocol overhead per agent-step\n\n")
            f.write("Command: `python benchmarks/text_protocol_overhead.py --write`\n\n")
            f.write(table + "\n\n" + note + "\n")


if __name__ == "__main__":
    main()
