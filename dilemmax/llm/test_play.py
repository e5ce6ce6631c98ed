"""Batched play: JAX-path equivalence, model seats through the protocol, memory, resume."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax import compile_log
from dilemmax.agents.arena import Arena
from dilemmax.agents.policy import random_policy
from dilemmax.envs.consequence import generator
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.text import MoralHazardText
from dilemmax.envs.registry import build_key
from dilemmax.envs.rollout import Observation, run_episodes
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol
from dilemmax.llm.client import Completion, ScriptedClient, last_user_message
from dilemmax.llm.model_seats import CallsFailed
from dilemmax.llm.play import BatchedPlay, Seat, _stacked_keys, episode_jobs, rotate_seats
from dilemmax.llm.policy import LLMPolicy, parse_safely
from dilemmax.llm.transcript import Transcript, TranscriptMismatch, read_lines

EPISODES, ENVS = 5, 4  # two waves, the second padded with inactive copies


class RecordingProtocol(MoralHazardText):
    """The moral-hazard protocol plus the play hooks a paper protocol uses: a non-querier gets
    NoReply at the note stage, each agent's memory logs its replies, and after the work step
    every agent is asked one reflect question."""

    def new_memory(self, agent):
        return {"inner": super().new_memory(agent), "agent": agent, "log": []}

    def turn(self, state, agent, memory):
        i = self.env.agent_index[agent]
        if int(state.stage) == c.NOTE and not bool(state.queried[i]):
            return NoReply(c.NO_NOTE)
        return super().turn(state, agent, memory["inner"])

    def parse_reply(self, reply, prompt):
        if prompt.kind == "reflect":  # the lesson is read by the parser, kept by after_reply
            return ParsedReply(c.NO_MOVE, True, fields={"lesson": reply.strip()})
        return super().parse_reply(reply, prompt)

    def after_reply(self, memory, agent, prompt, reply, parsed):
        memory["log"].append((prompt.kind, parsed.fields.get("lesson", reply)))
        super().after_reply(memory["inner"], agent, prompt, reply, parsed)

    def after_step(self, memory, agent, state, actions, infos, next_state):
        if int(state.stage) == c.WORK:
            return [Prompt("", "What did you learn this round?", kind="reflect")]
        return []


def reply_for(request) -> str:
    text = last_user_message(request)
    if "What did you learn" in text:
        return "LESSON: query when the team value is high"
    if "(work)" in text:
        return "ACTION QUERY" if "Agent 1 of" in text else "ACTION LOCAL A"
    if "(note)" in text:
        return "nothing to say"  # invalid: no NOTE line
    return "FINAL A"


@pytest.fixture(scope="module")
def env():
    return dilemmax.make("moral_hazard")


@pytest.fixture(scope="module")
def teacher(env):
    return env.scripted_policies()["teacher"]


@pytest.mark.slow
def test_scripted_seats_match_the_jax_path(env, teacher):
    seats = [Seat("scripted:teacher", teacher)] * env.num_agents
    result = BatchedPlay(env, seats, num_envs=ENVS).run(jax.random.key(3), EPISODES)
    _, expected = run_episodes(env, teacher, jax.random.key(3), EPISODES)
    assert set(result.metrics) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(result.metrics[name], np.asarray(value), err_msg=name)
    assert [e["episode"] for e in result.episodes] == list(range(EPISODES))


def _model_run(env, teacher, transcript=None, client=None, **options):
    client = client or ScriptedClient(reply_for)
    model = LLMPolicy(client, "model")
    seats = [Seat("model", model), Seat("model", model)]
    protocol = RecordingProtocol(env)
    runner = BatchedPlay(env, seats, protocol, num_envs=ENVS, transcript=transcript, **options)
    return runner.run(jax.random.key(1), EPISODES), client, runner


def test_model_seats_noreply_reflect_and_validity(env, teacher):
    result, client, runner = _model_run(env, teacher)
    texts = [last_user_message(r) for r in client.calls]
    # Per episode: 2 work calls, 2 reflect calls, 1 note call (agent_1 did not query, so it
    # gets NoReply and is not called), 2 final calls.
    assert len(client.calls) == EPISODES * 7
    assert sum("(note)" in t for t in texts) == EPISODES
    assert sum("What did you learn" in t for t in texts) == 2 * EPISODES
    # Reflect prompts of a step are sent before the next turn: every wave sends its work
    # batch, then its reflect batch, then the note batch.
    first_wave = texts[: 2 * ENVS + 2 * ENVS + ENVS]
    assert all("(work)" in t for t in first_wave[: 2 * ENVS])
    assert all("What did you learn" in t for t in first_wave[2 * ENVS : 4 * ENVS])
    stats = runner.stats["model"]
    assert stats.act_calls == EPISODES * 5 and stats.calls == EPISODES * 7
    assert stats.valid == EPISODES * 4  # the note replies are invalid, counted, not raised
    # The env saw exactly what the replies asked for: agent_0 always queries, agent_1 never.
    np.testing.assert_allclose(result.metrics["query_by_agent"], [[1.0, 0.0]] * EPISODES)
    np.testing.assert_allclose(result.metrics["note_rate"], 0.0)


def test_memory_is_per_env_and_agent(env):
    memories = []

    class Spy(RecordingProtocol):
        def new_memory(self, agent):
            memory = super().new_memory(agent)
            memories.append(memory)
            return memory

    model = LLMPolicy(ScriptedClient(reply_for), "model")
    runner = BatchedPlay(env, [Seat("model", model)] * 2, Spy(env), num_envs=ENVS)
    runner.run(jax.random.key(0), EPISODES)
    assert len(memories) == EPISODES * 2  # a fresh memory per episode and agent (default)
    for memory in memories:
        kinds = [kind for kind, _ in memory["log"]]
        expected = 4 if memory["agent"] == "agent_0" else 3  # agent_1 has no note turn
        assert len(kinds) == expected and kinds.count("reflect") == 1
        assert ("reflect", "LESSON: query when the team value is high") in memory["log"]


def test_parser_that_raises_gives_an_invalid_move(env):
    class Broken(RecordingProtocol):
        def parse_reply(self, reply, prompt):
            raise RecursionError("deep")

    model = LLMPolicy(ScriptedClient(reply_for), "model")
    runner = BatchedPlay(env, [Seat("model", model)] * 2, Broken(env), num_envs=2)
    result = runner.run(jax.random.key(0), 2)
    assert runner.stats["model"].valid == 0
    np.testing.assert_allclose(result.metrics["format_validity"], 0.0)


def test_resume_replays_every_call_and_refuses_changed_prompts(env, teacher, tmp_path):
    path = tmp_path / "transcript.jsonl"
    identity = {"test": 1}
    with Transcript(path, identity) as transcript:
        first, client, _ = _model_run(env, teacher, transcript)
    rows, _ = read_lines(path)
    calls = [r for r in rows if r["type"] == "call"]
    assert len(calls) == len(client.calls) == len({r["key"] for r in calls})
    assert sum(r["type"] == "episode" for r in rows) == EPISODES
    # A crash mid-write leaves a partial last line: it is ignored and cut off.
    with open(path, "a") as handle:
        handle.write('{"type": "call", "key": "main|e9')
    silent = ScriptedClient(lambda r: pytest.fail("a recorded call was sent again"))
    with Transcript(path, identity, resume=True) as transcript:
        again, _, runner = _model_run(env, teacher, transcript, silent)
    assert runner.stats["model"].replayed == len(calls)
    for name in first.metrics:
        np.testing.assert_array_equal(first.metrics[name], again.metrics[name])
    assert path.read_text().endswith("\n")
    assert len(read_lines(path)[0]) == len(rows)  # nothing duplicated
    # Another command's transcript, or a changed prompt, is refused.
    with pytest.raises(TranscriptMismatch):
        Transcript(path, {"test": 2}, resume=True)
    with Transcript(path, identity, resume=True) as transcript:
        key = calls[0]["key"]
        with pytest.raises(TranscriptMismatch):
            transcript.replay(key, Prompt("changed", "prompt"))
    with pytest.raises(FileExistsError):
        Transcript(path, identity)


def test_model_in_the_arena_python_path(env):
    client = ScriptedClient(reply_for)
    model = LLMPolicy(client, "model")
    arena = Arena(env, [model, model], text_protocol=RecordingProtocol(env))
    result = arena.run(jax.random.key(0), 2)
    assert len(client.calls) == 2 * 7  # NoReply seats are not called; reflects are sent
    np.testing.assert_allclose(result.metrics["query_by_agent"], [[1.0, 0.0]] * 2)
    assert model.stats.act_calls == 2 * 5


def test_episode_jobs_and_rotation():
    jobs = episode_jobs(jax.random.key(0), 2, 3)
    assert [(j.episode, j.config_index) for j in jobs] == [
        (0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 2)
    ]  # fmt: skip
    seats = [Seat(n, None) for n in "abc"]
    assert [s.name for s in rotate_seats(seats, 1)] == ["c", "a", "b"]
    seen = {tuple(s.name for s in rotate_seats(seats, k)) for k in range(3)}
    assert all(sorted(col) == ["a", "b", "c"] for col in zip(*seen, strict=True))


@pytest.mark.slow
def test_consequence_grid_with_a_model_seat(tmp_path):
    env = dilemmax.make("consequence")
    configs = generator.cross_rules(
        jax.tree.map(lambda x: x[:3], generator.context_grid()), ["RP", "AON"]
    )
    model = LLMPolicy(ScriptedClient(lambda r: "I give 4.\nCONTRIBUTE 4"), "model")
    scripted = env.scripted_policies()
    other = scripted[sorted(scripted)[0]]
    seats = [Seat("model", model), Seat("s", other), Seat("s", other)]
    with Transcript(tmp_path / "t.jsonl", {"x": 1}) as transcript:
        result = BatchedPlay(env, seats, num_envs=8, transcript=transcript).run(
            jax.random.key(0), 1, configs
        )
    assert len(result.episodes) == 6
    assert [e["config_index"] for e in result.episodes] == list(range(6))
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    calls = [r for r in rows if r["type"] == "call"]
    assert calls and all(r["seat"] == "model" and r["agent"] == "agent_0" for r in calls)
    assert {"prompt", "reply", "action", "valid", "prompt_hash", "latency_s"} <= set(calls[0])


def test_a_parser_failing_on_a_reflect_reply_keeps_its_text():
    parsed = parse_safely(None, "  a lesson ", Prompt("", "q", kind="reflect"))
    assert parsed == ParsedReply(-1, False, "parser raised AttributeError", "a lesson")


def test_two_models_each_answer_their_own_seat(env):
    first, second = ScriptedClient(reply_for), ScriptedClient(reply_for)
    seats = [Seat("a", LLMPolicy(first, "a")), Seat("b", LLMPolicy(second, "b"))]
    runner = BatchedPlay(env, seats, RecordingProtocol(env), num_envs=ENVS)
    runner.run(jax.random.key(2), 2)
    turns = lambda client: [t for t in map(last_user_message, client.calls) if "===" in t]
    assert turns(first) and all("Agent 1 of" in t for t in turns(first))
    assert turns(second) and all("Agent 2 of" in t for t in turns(second))
    assert runner.stats["a"].act_calls == 2 * 3 and runner.stats["b"].act_calls == 2 * 2


class FailingCall:
    """The scripted replies, except that call number ``fail_at`` (1-based) fails after its
    retries, as a dead server's would."""

    def __init__(self, fail_at: int):
        self.inner, self.fail_at, self.count = ScriptedClient(reply_for), fail_at, 0

    def complete(self, requests, on_result=None):
        out = []
        for i, request in enumerate(requests):
            self.count += 1
            if self.count == self.fail_at:
                completion = Completion("", retries=5, error="APIConnectionError: refused")
            else:
                completion = self.inner.complete([request])[0]
            out.append(completion)
            if on_result is not None:
                on_result(i, completion)
        return out


def test_a_call_failing_after_its_retries_stops_the_run_and_resume_finishes_it(
    env, teacher, tmp_path
):
    reference, _, _ = _model_run(env, teacher)
    path, identity = tmp_path / "transcript.jsonl", {"test": "failing"}
    with Transcript(path, identity) as transcript, pytest.raises(CallsFailed, match="--resume"):
        _model_run(env, teacher, transcript, FailingCall(fail_at=10))
    rows, _ = read_lines(path)
    written = [r for r in rows if r["type"] == "call"]
    assert written and not any(r["error"] for r in written)  # the failed call is not kept
    with Transcript(path, identity, resume=True) as transcript:
        resumed, client, runner = _model_run(env, teacher, transcript)
    assert runner.stats["model"].replayed == len(written)
    for name in reference.metrics:  # as if the outage never happened
        np.testing.assert_array_equal(reference.metrics[name], resumed.metrics[name])
    # Under "invalid" the run finishes: the failed call is recorded and counted as an error.
    finished, _, runner = _model_run(env, teacher, client=FailingCall(10), on_call_error="invalid")
    assert runner.stats["model"].errors == 1
    with pytest.raises(ValueError, match="on_call_error"):
        _model_run(env, teacher, on_call_error="ignore")


class PlantedMove(TextProtocol):
    """A model seat planted with a script: its turn's text is the move ``script`` makes on that
    state, the client echoes it, and the parser reads it back; so the model seat plays the
    script's moves through the whole model path (turns, a batch of calls, parsing)."""

    def __init__(self, env, script):
        self.env, self.script = env, script

    def render(self, state, agent):
        i = self.env.agent_index[agent]
        mask = self.env.action_mask(state)[agent]
        view = Observation(self.env.get_obs(state)[agent], mask, jnp.int32(i), state)
        return str(int(self.script(jax.random.key(0), view)))  # the script ignores its key

    def parse(self, reply, state, agent):
        return ParsedReply(int(reply), True)


class StepsAsMetrics(type(dilemmax.make("consequence"))):
    """The consequence game, reporting each played step's actions and rewards as metrics, so
    every driver's episodes can be compared step by step."""

    def episode_metrics(self, rollout):
        valid = rollout.valid[:, None]
        stack = lambda tree: jnp.stack([tree[a] for a in self.agents], axis=-1)
        return {
            **super().episode_metrics(rollout),
            "step_actions": jnp.where(valid, stack(rollout.actions), -2),
            "step_rewards": jnp.where(valid, stack(rollout.rewards), 0.0),
        }


@pytest.mark.slow
@pytest.mark.parametrize("with_configs", [False, True])
def test_one_key_schedule_for_the_scan_the_arena_and_batched_play(with_configs):
    """The JAX scan, the arena's Python loop and batched play (a planted model seat between
    two random seats) play the same steps from the same key: same seat keys, step keys, env
    keys, configurations and episode split."""
    env = StepsAsMetrics()
    script = env.scripted_policies()["fair_share"]
    model = LLMPolicy(ScriptedClient(last_user_message), "planted")
    protocol = PlantedMove(env, script)
    configs, episodes = None, 5
    if with_configs:  # two configurations x two episodes: the configuration-major split
        grid = jax.tree.map(lambda x: x[:1], generator.context_grid())
        configs, episodes = generator.cross_rules(grid, ["RP", "AON"]), 2
    key = jax.random.key(4)
    _, scanned = run_episodes(env, [random_policy, script, random_policy], key, episodes, configs)
    scanned = {k: np.asarray(v).reshape((-1,) + v.shape[2 if with_configs else 1 :])
               for k, v in scanned.items()}  # fmt: skip
    arena = Arena(env, [random_policy, model, random_policy], text_protocol=protocol)
    looped = arena.run(key, episodes, configs).metrics
    seats = [Seat("random", random_policy), Seat("planted", model), Seat("random", random_policy)]
    batched = BatchedPlay(env, seats, protocol, num_envs=3).run(key, episodes, configs).metrics
    assert model.stats.act_calls > 0 and np.any(scanned["step_rewards"] != 0)
    for name in ("step_actions", "step_rewards", "return", "length"):
        np.testing.assert_array_equal(looped[name], scanned[name], err_msg=f"arena {name}")
        np.testing.assert_array_equal(batched[name], scanned[name], err_msg=f"batched {name}")


class SeenBy(RecordingProtocol):
    """Notes which agent each play hook of this instance served (parses: by the prompt's seat)."""

    def __init__(self, env):
        super().__init__(env)
        self.seen = set()

    def turn(self, state, agent, memory):
        self.seen.add(("turn", agent))
        return super().turn(state, agent, memory)

    def parse_reply(self, reply, prompt):
        if prompt.kind == "act":
            self.seen.add(("parse", self.env.agents[int(prompt.context["seat"])]))
        return super().parse_reply(reply, prompt)

    def after_step(self, memory, agent, state, actions, infos, next_state):
        self.seen.add(("after_step", agent))
        return super().after_step(memory, agent, state, actions, infos, next_state)


def test_each_seat_plays_with_its_own_protocol_instance(env):
    model = LLMPolicy(ScriptedClient(reply_for), "m")
    first, second = SeenBy(env), SeenBy(env)
    seats = [Seat("m", model), Seat("m", model)]
    protocols = {"agent_0": first, "agent_1": second}
    BatchedPlay(env, seats, first, num_envs=2, protocols=protocols).run(jax.random.key(0), 2)
    hooks = {"turn", "parse", "after_step"}
    assert first.seen == {(h, "agent_0") for h in hooks}
    assert second.seen == {(h, "agent_1") for h in hooks}
    # A seat's own options over the default protocol: its own instance (brief prompts here).
    seats = [Seat("m", model), Seat("m", model, protocol_options={"brief": True})]
    runner = BatchedPlay(env, seats, num_envs=2)
    assert runner.protocols["agent_1"].brief and not runner.protocols["agent_0"].brief
    with pytest.raises(ValueError, match="pass its protocol in protocols="):
        BatchedPlay(env, seats, MoralHazardText(env), num_envs=2)


def test_an_env_made_alike_plays_the_compiled_loop_of_the_first(env, teacher):
    """Each play session builds its env afresh; batched play keys its compiled loop on how the
    env was made (game and options), so a second session of a sweep or notebook compiles
    nothing, and plays exactly what the first played."""
    compiled = compile_log.CompileTally()
    compile_log.listen(compiled)
    first, _, _ = _model_run(env, teacher)
    before = compiled.programs
    again, _, _ = _model_run(dilemmax.make("moral_hazard"), teacher)
    assert compiled.programs == before, "an env made alike compiled the loop again"
    for name, value in first.metrics.items():
        np.testing.assert_array_equal(again.metrics[name], value, err_msg=name)


def test_only_envs_made_alike_share_a_build_key(env):
    assert build_key(dilemmax.make("moral_hazard")) == build_key(env)
    assert build_key(dilemmax.make("moral_hazard", num_agents=3)) != build_key(env)
    assert build_key(dilemmax.make("consequence")) != build_key(env)

    class Forwarding:  # a wrapper that forwards every attribute, made_as included
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

    wrapped = Forwarding(env)
    assert wrapped.made_as == env.made_as
    assert build_key(wrapped) == ("instance", id(wrapped)) != build_key(Forwarding(env))
    # An option that is not plain data keys on the env itself: two long arrays differing in
    # their middle print alike.
    one, other = dilemmax.make("moral_hazard"), dilemmax.make("moral_hazard")
    one.made_as = {**one.made_as, "options": {"weights": np.zeros(2000)}}
    middle = np.where(np.arange(2000) == 1000, 1.0, 0.0)
    other.made_as = {**other.made_as, "options": {"weights": middle}}
    assert repr(one.made_as["options"]) == repr(other.made_as["options"])
    assert build_key(one) == ("instance", id(one)) and build_key(other) == ("instance", id(other))
    plain = dilemmax.make("moral_hazard")
    plain.made_as = {**plain.made_as, "options": {"sizes": (2, [3, 4.5]), "name": None}}
    assert build_key(plain)[0] is type(env)


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey])
def test_a_wave_s_keys_are_stacked_without_compiling_a_program_per_wave_size(make_key):
    """A wave's episode keys become one array on the host: the same keys as ``jnp.stack``
    gives, typed or legacy, and no program with one operand per key for each wave size (a
    1,140-episode sweep compiled one for 10 s)."""
    keys = list(jax.random.split(make_key(5), 300))
    _stacked_keys(keys[:3])  # the per-key unwrap, compiled once per key shape
    compiled = compile_log.CompileTally()
    compile_log.listen(compiled)
    stacked = _stacked_keys(keys)
    assert compiled.programs == 0
    expected = jnp.stack(keys)
    assert stacked.dtype == expected.dtype
    np.testing.assert_array_equal(jax.random.key_data(stacked), jax.random.key_data(expected))
