"""What the language-model harness costs, per game, and how fast batched play runs.

Two measurements (compile excluded: every configuration is played once untimed first):

- ``overhead``: the harness's host work per model agent-step (the protocol's turn and parse,
  memory hooks, device-to-host copies of the state, the transcript line, stats), the
  client excluded: every seat is a model behind an instant scripted client whose own seconds
  are subtracted. Reported as wall time and as CPU time of the harness thread (less sensitive
  to a loaded machine), with the part spent inside the game's protocol.
- ``throughput``: agent-steps/s of batched play against the local OpenAI-compatible server
  (``python -m dilemmax.llm.server``, in its own process: instant replies over real HTTP), at
  1, 16 and 256 envs; every seat is the model.

    python benchmarks/llm_harness.py overhead
    python benchmarks/llm_harness.py throughput --envs 1 16 256
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import jax
from timing import load, machine

import dilemmax
from dilemmax.llm.client import ScriptedClient
from dilemmax.llm.play import BatchedPlay, Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.transcript import Transcript

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


class _Clock:
    """Adds up wall and thread-CPU seconds of wrapped callables."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def wrap(self, method):
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - wall
                self.cpu += time.thread_time() - cpu

        return timed


PROTOCOL_HOOKS = ("new_memory", "next_memory", "turn", "parse_reply", "after_reply",
                  "after_step", "after_episode")  # fmt: skip


def overhead(env_id: str, num_envs: int, episodes: int, repeats: int) -> dict:
    """Seconds per model agent-step spent in the harness's host code (the model seats' turns,
    replies, parsing, memory hooks, state copies, stats), less the scripted client's own work;
    and the part of it inside the game's protocol."""
    env = dilemmax.make(env_id)
    steps = GRID_STEPS if env.max_steps > 100 else None
    client_clock, protocol_clock = _Clock(), _Clock()
    protocol = env.text_protocol()
    for name in PROTOCOL_HOOKS:
        setattr(protocol, name, protocol_clock.wrap(getattr(protocol, name)))
    reply = client_clock.wrap(lambda request: REPLIES[env_id])
    model = LLMPolicy(ScriptedClient(reply), "model")
    seats = [Seat("model", model)] * env.num_agents
    _play(env, seats, num_envs, episodes, steps, protocol)  # compile
    best = None
    for repeat in range(repeats):
        harness = _Clock()
        path = Path(tempfile.mkdtemp()) / f"transcript_{repeat}.jsonl"
        transcript = Transcript(path, {"benchmark": env_id})  # written as in a real run
        runner = BatchedPlay(env, seats, protocol, num_envs, steps, transcript)
        runner._model_actions = harness.wrap(runner._model_actions)
        runner._observe = harness.wrap(runner._observe)
        client_clock.wall = client_clock.cpu = protocol_clock.wall = protocol_clock.cpu = 0.0
        runner.run(jax.random.key(1), episodes)
        transcript.close()
        calls = runner.stats["model"].calls
        row = {
            "wall_ms": (harness.wall - client_clock.wall) / calls * 1e3,
            "cpu_ms": (harness.cpu - client_clock.cpu) / calls * 1e3,
            "protocol_cpu_ms": protocol_clock.cpu / calls * 1e3,
            "agent_steps": calls,
        }
        if best is None or row["cpu_ms"] < best["cpu_ms"]:
            best = row
    best["bookkeeping_cpu_ms"] = best["cpu_ms"] - best["protocol_cpu_ms"]
    return {"env": env_id, **best, "load": load()}


def _server_process(reply: str):
    """The local server in its own process (so it does not share this one's GIL)."""
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "dilemmax.llm.server", "--reply", reply],
        stdout=subprocess.PIPE,
        text=True,
    )
    return process, process.stdout.readline().strip()


def throughput(env_id: str, num_envs: int, episodes: int, concurrency: int) -> dict:
    from dilemmax.llm.openai_client import OpenAIClient

    env = dilemmax.make(env_id)
    steps = GRID_STEPS if env.max_steps > 100 else None
    process, base_url = _server_process(REPLIES[env_id])
    try:
        client = OpenAIClient("local", base_url=base_url, concurrency=concurrency)
        model = LLMPolicy(client, "model")
        seats = [Seat("model", model)] * env.num_agents
        _play(env, seats, num_envs, episodes, steps)  # compile and warm the connections
        seconds, result, runner = _play(env, seats, num_envs, episodes, steps)
    finally:
        process.kill()
        process.wait()
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
        print("| game | model agent-steps | harness wall ms | harness CPU ms | of which protocol "
              "CPU ms | of which bookkeeping CPU ms | load |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for game in args.games:
            num_envs = args.envs[0]
            r = overhead(game, num_envs, args.episodes or 2 * num_envs, args.repeats)
            print(
                f"| {game} | {r['agent_steps']} | {r['wall_ms']:.3f} | {r['cpu_ms']:.3f} | "
                f"{r['protocol_cpu_ms']:.3f} | {r['bookkeeping_cpu_ms']:.3f} | {r['load']} |",
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
