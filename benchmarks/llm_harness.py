"""What the language-model harness costs, per game, and how fast batched play runs.

Two measurements (compile excluded: every configuration is played once untimed first):

- ``overhead``: the harness's host work per model agent-step (the protocol's turn and parse,
  prompt hashing, stats, device-to-host copies of the state, memory hooks), client excluded.
  Measured as the wall time of batched play with every seat a model behind an instant scripted
  client, minus that of the same play with every seat a jittable policy, over the number of
  model agent-steps; split into the time inside the game's protocol (render, parse, memory
  hooks) and the rest (the harness's own bookkeeping).
- ``throughput``: agent-steps/s of batched play against the local OpenAI-compatible server
  (``dilemmax.llm.server``, instant replies over real HTTP), at 1, 16 and 256 envs.

    python benchmarks/llm_harness.py overhead
    python benchmarks/llm_harness.py throughput --envs 1 16 256
"""

from __future__ import annotations

import argparse
import time

import jax
from timing import load, machine

import dilemmax
from dilemmax.agents.policy import first_legal_policy
from dilemmax.llm.client import ScriptedClient
from dilemmax.llm.play import BatchedPlay, Seat
from dilemmax.llm.policy import LLMPolicy

# A well-formed reply per game (the parser's cost on a typical reply).
REPLIES = {
    "moral_hazard": "The query protects my successor.\nACTION QUERY",
    "consequence": "I keep some back this round.\nCONTRIBUTION: 3",
    "open_cleanup": "The river is dirty, so I move toward it.\nACTION up",
    "open_harvest": '{"reason": "apples ahead", "action": "move_up"}',
}
GRID_STEPS = 20  # grid games: the first steps of an episode (2,000-step episodes otherwise)


def _play(env, seats, num_envs, episodes, steps, protocol=None):
    runner = BatchedPlay(env, seats, protocol, num_envs=num_envs, max_steps=steps)
    start = time.perf_counter()
    result = runner.run(jax.random.key(1), episodes)
    return time.perf_counter() - start, result, runner


class _Timed:
    """Wraps a protocol, adding up the seconds its play hooks take (turn, parse, memory)."""

    HOOKS = ("new_memory", "next_memory", "turn", "parse_reply", "after_reply", "after_step",
             "after_episode")  # fmt: skip

    def __init__(self, protocol):
        self.seconds = 0.0
        for name in self.HOOKS:
            setattr(protocol, name, self._timed(getattr(protocol, name)))
        self.protocol = protocol

    def _timed(self, method):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


def overhead(env_id: str, num_envs: int, episodes: int, repeats: int) -> dict:
    env = dilemmax.make(env_id)
    steps = GRID_STEPS if env.max_steps > 100 else None
    timed = _Timed(env.text_protocol())
    model = LLMPolicy(ScriptedClient(lambda request: REPLIES[env_id]), "model")
    model_seats = [Seat("model", model)] * env.num_agents
    scripted_seats = [Seat("first_legal", first_legal_policy)] * env.num_agents
    _play(env, model_seats, num_envs, episodes, steps, timed.protocol)  # compile
    _play(env, scripted_seats, num_envs, episodes, steps)
    best = None
    for _ in range(repeats):
        timed.seconds = 0.0
        seconds, _, runner = _play(env, model_seats, num_envs, episodes, steps, timed.protocol)
        if best is None or seconds < best[0]:
            best = (seconds, timed.seconds, runner.stats["model"].calls)
    with_model, protocol_s, calls = best
    scripted = min(_play(env, scripted_seats, num_envs, episodes, steps)[0] for _ in range(repeats))
    per_step = lambda seconds: seconds / calls * 1e3
    return {
        "env": env_id,
        "agent_steps": calls,
        "overhead_ms": per_step(with_model - scripted),
        "protocol_ms": per_step(protocol_s),
        "bookkeeping_ms": per_step(with_model - scripted - protocol_s),
        "load": load(),
    }


def throughput(env_id: str, num_envs: int, episodes: int, concurrency: int) -> dict:
    from dilemmax.llm.openai_client import OpenAIClient
    from dilemmax.llm.server import LocalChatServer

    env = dilemmax.make(env_id)
    steps = GRID_STEPS if env.max_steps > 100 else None
    with LocalChatServer(lambda body: REPLIES[env_id]) as server:
        client = OpenAIClient("local", base_url=server.base_url, concurrency=concurrency)
        model = LLMPolicy(client, "model")
        seats = [Seat("model", model)] * env.num_agents
        _play(env, seats, num_envs, episodes, steps)  # compile and warm the connections
        seconds, result, runner = _play(env, seats, num_envs, episodes, steps)
    calls = runner.stats["model"].calls
    return {
        "env": env_id,
        "envs": num_envs,
        "episodes": episodes,
        "agent_steps": calls,
        "seconds": seconds,
        "agent_steps_per_s": calls / seconds,
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["overhead", "throughput"])
    parser.add_argument("--games", nargs="+", default=list(REPLIES))
    parser.add_argument("--envs", nargs="+", type=int, default=[16])
    parser.add_argument("--episodes", type=int, default=None, help="default: 2 waves")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    if args.part == "overhead":
        print("| game | model agent-steps | harness ms / agent-step | of which protocol ms | "
              "of which bookkeeping ms | load |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: | --- |")
        for game in args.games:
            num_envs = args.envs[0]
            r = overhead(game, num_envs, args.episodes or 2 * num_envs, args.repeats)
            print(
                f"| {game} | {r['agent_steps']} | {r['overhead_ms']:.3f} | "
                f"{r['protocol_ms']:.3f} | {r['bookkeeping_ms']:.3f} | {r['load']} |",
                flush=True,
            )
        return
    print("| game | envs | episodes | agent-steps | seconds | agent-steps/s | load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for game in args.games:
        for num_envs in args.envs:
            episodes = args.episodes or max(num_envs, 8)
            r = throughput(game, num_envs, episodes, args.concurrency)
            print(
                f"| {game} | {num_envs} | {episodes} | {r['agent_steps']} | "
                f"{r['seconds']:.2f} | {r['agent_steps_per_s']:.0f} | {r['load']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
