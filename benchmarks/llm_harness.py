"""What the language-model harness costs, per game, and how fast batched play runs.

Two measurements (compile excluded: every configuration is played once untimed first):

- ``overhead``: the harness's host work per model agent-step (the protocol's turn and parse,
  memory hooks, device-to-host copies of the state, the transcript line, stats), the
  client excluded: every seat is a model behind an instant scripted client whose own seconds
  are subtracted. Reported as wall time and as CPU time of the harness thread (less sensitive
  to a loaded machine), with the part spent inside the game's protocol.
- ``throughput``: agent-steps/s of batched play against the local OpenAI-compatible server
  (``python -m dilemmax.llm.server_cli``, in its own process: instant replies over real HTTP), at
  1, 16 and 256 envs; every seat is the model. The seat kinds are played side by side, in turn
  against the same server, so their ratio comes from one run: ``openai`` (dilemmax's async
  client), ``inspect`` (Inspect AI's ``openai-api`` provider, an ``inspect:`` seat) and ``sdk``
  (the official ``openai`` package, synchronous, a thread per call in flight: what the
  ``openai:`` seat was before). Besides wall time, the CPU seconds per call of this process
  and of the server's process are given: on a loaded machine they are the steadier figures,
  and ``1 / max(...)`` is what two free cores would allow.

- ``client``: the clients alone, no game: batches of ``--envs`` identical requests (a
  moral_hazard-sized prompt) against the same server, calls/s and CPU ms per call.

    python benchmarks/llm_harness.py overhead
    python benchmarks/llm_harness.py throughput --envs 1 16 256 --clients openai inspect sdk
    python benchmarks/llm_harness.py client --envs 256
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import jax
from timing import load, machine

import dilemmax
from dilemmax.llm.client import ChatRequest, ScriptedClient
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.model_seats import ModelSeats
from dilemmax.llm.openai_client import OpenAIClient
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


@contextlib.contextmanager
def _timed_hooks(clock: _Clock):
    """The model seats' two hooks of every step (turns and replies; memory after the step)
    timed by ``clock`` while the block runs."""
    saved = ModelSeats.fill, ModelSeats.observe
    ModelSeats.fill, ModelSeats.observe = clock.wrap(saved[0]), clock.wrap(saved[1])
    try:
        yield
    finally:
        ModelSeats.fill, ModelSeats.observe = saved


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
        client_clock.wall = client_clock.cpu = protocol_clock.wall = protocol_clock.cpu = 0.0
        with _timed_hooks(harness):
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
    process = subprocess.Popen(
        [sys.executable, "-m", "dilemmax.llm.server_cli", "--reply", reply],
        stdout=subprocess.PIPE,
        text=True,
    )
    return process, process.stdout.readline().strip()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class SdkClient:
    """The baseline: the official ``openai`` package, synchronous, one thread per call in flight
    (what the ``openai:`` seat was before the async client). Replies only, no retries."""

    def __init__(self, base_url: str, concurrency: int):
        import openai  # the baseline's own dependency

        self.openai = openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)
        self.concurrency = concurrency

    def complete(self, requests, on_result=None):
        def one(index):
            start = time.perf_counter()
            messages = [dict(m) for m in requests[index].messages]
            response = self.openai.chat.completions.create(model="local", messages=messages)
            completion = OpenAIClient._completion(response, time.perf_counter() - start, 0)
            if on_result is not None:
                on_result(index, completion)
            return completion

        with ThreadPoolExecutor(min(self.concurrency, max(len(requests), 1))) as pool:
            return list(pool.map(one, range(len(requests))))


def _client(kind: str, base_url: str, concurrency: int):
    if kind == "openai":
        return OpenAIClient("local", GenerateConfig(base_url=base_url, concurrency=concurrency))
    if kind == "inspect":
        from dilemmax.llm import inspect_client  # the optional inspect extra

        config = replace(inspect_client.DEFAULT, base_url=base_url, concurrency=concurrency)
        return inspect_client.InspectClient("openai-api/local/local", config)
    return SdkClient(base_url, concurrency)


def throughput(env_id: str, num_envs: int, episodes: int, concurrency: int, kinds) -> list:
    """One row per client kind, played in turn against one server process (A/B in one run)."""
    env = dilemmax.make(env_id)
    steps = GRID_STEPS if env.max_steps > 100 else None
    process, base_url = _server_process(REPLIES[env_id])
    rows = []
    try:
        for kind in kinds:
            model = LLMPolicy(_client(kind, base_url, concurrency), "model")
            seats = [Seat("model", model)] * env.num_agents
            _play(env, seats, num_envs, episodes, steps)  # compile and warm the connections
            cpu, server_cpu = time.process_time(), _cpu_seconds(process.pid)
            seconds, result, runner = _play(env, seats, num_envs, episodes, steps)
            cpu, server_cpu = time.process_time() - cpu, _cpu_seconds(process.pid) - server_cpu
            calls = runner.stats["model"].calls
            assert runner.stats["model"].errors == 0, f"{kind}: calls failed"
            rows.append(
                {
                    "env": env_id,
                    "client": kind,
                    "envs": num_envs,
                    "episodes": episodes,
                    "agent_steps": calls,
                    "seconds": seconds,
                    "agent_steps_per_s": calls / seconds,
                    "harness_cpu_ms": cpu / calls * 1e3,
                    "server_cpu_ms": server_cpu / calls * 1e3,
                    "load": load(),
                }
            )
    finally:
        process.kill()
        process.wait()
    return rows


def clients_alone(batch: int, batches: int, concurrency: int, kinds) -> list:
    """Calls/s and CPU per call of each client without the harness: ``batches`` batches of
    ``batch`` requests against one server process, in turn."""
    process, base_url = _server_process("ACTION QUERY")
    messages = ({"role": "system", "content": "rules " * 300},
                {"role": "user", "content": "state " * 200})  # fmt: skip
    requests = [ChatRequest(messages)] * batch
    rows = []
    try:
        for kind in kinds:
            client = _client(kind, base_url, concurrency)
            client.complete(requests)  # connections and imports warmed
            cpu, server_cpu = time.process_time(), _cpu_seconds(process.pid)
            start = time.perf_counter()
            for _ in range(batches):
                client.complete(requests)
            seconds = time.perf_counter() - start
            cpu, server_cpu = time.process_time() - cpu, _cpu_seconds(process.pid) - server_cpu
            calls = batch * batches
            rows.append({"client": kind, "calls": calls, "calls_per_s": calls / seconds,
                         "client_cpu_ms": cpu / calls * 1e3,
                         "server_cpu_ms": server_cpu / calls * 1e3, "load": load()})  # fmt: skip
    finally:
        process.kill()
        process.wait()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["overhead", "throughput", "client"])
    parser.add_argument("--games", nargs="+", default=list(REPLIES))
    parser.add_argument("--envs", nargs="+", type=int, default=[16])
    parser.add_argument("--episodes", type=int, default=None, help="default: 2 waves")
    parser.add_argument("--repeats", type=int, default=2)
    # Calls in flight per client: 256 lets a 256-env step go out at once (64 leaves the harness
    # waiting between rounds of the step's calls; see results/llm_clients.md).
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--clients", nargs="+", default=["openai", "inspect", "sdk"],
                        choices=["openai", "inspect", "sdk"])  # fmt: skip
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
    if args.part == "client":
        print("| client | batch | calls | calls/s | client CPU ms/call | server CPU ms/call | "
              "load |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for r in clients_alone(args.envs[0], 6, args.concurrency, args.clients):
            print(
                f"| {r['client']} | {args.envs[0]} | {r['calls']} | {r['calls_per_s']:.0f} | "
                f"{r['client_cpu_ms']:.3f} | {r['server_cpu_ms']:.3f} | {r['load']} |",
                flush=True,
            )
        return
    print("| game | client | envs | episodes | agent-steps | seconds | agent-steps/s | "
          "harness CPU ms/call | server CPU ms/call | load |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for game in args.games:
        for num_envs in args.envs:
            episodes = args.episodes or max(num_envs, 8)
            for r in throughput(game, num_envs, episodes, args.concurrency, args.clients):
                print(
                    f"| {game} | {r['client']} | {num_envs} | {episodes} | {r['agent_steps']} | "
                    f"{r['seconds']:.2f} | {r['agent_steps_per_s']:.0f} | "
                    f"{r['harness_cpu_ms']:.2f} | {r['server_cpu_ms']:.2f} | {r['load']} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
