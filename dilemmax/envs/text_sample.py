"""A text protocol's real prompts on real env states, and how much of them a prefix cache reuses.

:func:`render_calls` plays episodes of an env through the play interface of one or more sets of
protocols (one set per layout, say ``"paper"`` and ``"cached"``), with stand-in replies: each
seat plays a random legal action, written as the protocol's own well-formed reply
(:func:`stand_in_action`, :func:`stand_in_reply`: the stand-in model, which the plan of a run,
``dilemmax.llm.plan``, seats as well). Every set sees the same states and the same replies, so
their prompts differ only in how they are written. It is what the prompt-layout tests and
``benchmarks/llm_cost.py`` measure.

The measure of a layout (:func:`prefix_shares`) is the one a prefix-caching server rewards: the
longest common leading text of two calls' whole message lists (system, then user), as a share of
the later call's length. ``same_seat``: consecutive calls of one seat; ``cross_seat``: each seat
against the seat before it at the same step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from dilemmax.envs.text import NoReply, Prompt, TextProtocol


@dataclass(frozen=True)
class Call:
    """One rendered model call: which seat asked it, at which step of the run, its text."""

    seat: str
    step: int  # env steps played before it, over every episode rendered
    kind: str  # "act" or "reflect"
    text: str  # system then user, as a server sees the message list
    reply: str  # the stand-in reply it got


def stand_in_action(prompt: Prompt, rng: np.random.Generator) -> int | None:
    """The stand-in model's move: a random legal action of an ``"act"`` prompt (0 where none is
    legal), None for a prompt that plays none (a reflection)."""
    if prompt.kind != "act":
        return None
    return int(rng.choice(prompt.legal)) if prompt.legal else 0


def stand_in_reply(
    protocol: TextProtocol, prompt: Prompt, action: int | None, rng: np.random.Generator
) -> str:
    """The stand-in model's reply: the protocol's well-formed reply playing ``action``
    (``TextProtocol.example_reply``; the action's number for a protocol that writes none)."""
    example = getattr(protocol, "example_reply", None)
    return str(action) if example is None else example(prompt, action, rng)


def message_text(prompt: Prompt) -> str:
    """The prompt's messages as a server reads them, in order: system, then user."""
    return prompt.system + prompt.user


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common leading text of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid)
    return lo


def prefix_shares(calls: Sequence[Call]) -> dict[str, float]:
    """``same_seat`` and ``cross_seat`` shared-prefix shares of ``calls`` (module docstring)."""
    same, cross = [], []
    last: dict[str, str] = {}
    previous: tuple[int, str] | None = None  # (step, text) of the act call before, any seat
    for call in calls:
        if call.seat in last:
            same.append(common_prefix(last[call.seat], call.text) / max(len(call.text), 1))
        last[call.seat] = call.text
        if call.kind == "act":
            if previous is not None and previous[0] == call.step:
                cross.append(common_prefix(previous[1], call.text) / max(len(call.text), 1))
            previous = (call.step, call.text)
    return {"same_seat": _mean(same), "cross_seat": _mean(cross)}


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def render_calls(
    env,
    layouts: Mapping[str, Mapping[str, TextProtocol]],
    episodes: int = 1,
    seed: int = 0,
    configs: Any = None,
    max_steps: int | None = None,
) -> dict[str, list[Call]]:
    """layout -> the calls of ``episodes`` episodes of ``env`` rendered by that layout's
    protocols (agent -> protocol). The replies come from the first layout's prompts. ``configs``:
    batched configurations (leading axis C), played in turn; None: the env samples its own.
    ``max_steps``: stop after that many env steps in all (a sample of a long run)."""
    renderer = _Renderer(env, layouts, seed)
    count = None if configs is None else len(jax.tree.leaves(configs)[0])
    for episode in range(episodes):
        config = None if count is None else jax.tree.map(lambda x, e=episode: x[e % count], configs)
        if not renderer.episode(config, max_steps):
            break
    return renderer.calls


class _Renderer:
    """Plays episodes, every layout's protocols turning each state into prompts."""

    def __init__(self, env, layouts: Mapping[str, Mapping[str, TextProtocol]], seed: int):
        self.env, self.layouts = env, layouts
        self.reset, self.reset_to = jax.jit(env.reset), jax.jit(env.reset_to)
        self.step = jax.jit(env.step_env)
        self.rng = np.random.default_rng(seed)
        self.key = jax.random.key(seed)
        self.calls: dict[str, list[Call]] = {name: [] for name in layouts}
        self.memories = {
            name: {a: p.new_memory(a) for a, p in ps.items()} for name, ps in layouts.items()
        }
        self.played = 0  # env steps

    def _seats(self) -> Iterator[tuple[str, str, TextProtocol]]:
        for name, protocols in self.layouts.items():
            for agent, protocol in protocols.items():
                yield name, agent, protocol

    def episode(self, config, max_steps: int | None) -> bool:
        """Plays one episode (``config`` None: the env samples one); False once ``max_steps``
        env steps are played."""
        self.key, sub = jax.random.split(self.key)
        _, state = self.reset(sub) if config is None else self.reset_to(sub, config)
        while True:
            view = jax.device_get(state)
            actions = self._turns(view)
            self.key, sub = jax.random.split(self.key)
            _, state, _, dones, infos = self.step(
                sub, state, {a: np.int32(v) for a, v in actions.items()}
            )
            after, infos = jax.device_get(state), jax.device_get(infos)
            self.played += 1
            for name, agent, protocol in self._seats():
                memory = self.memories[name][agent]
                for ask in protocol.after_step(memory, agent, view, actions, infos, after):
                    self._answer(name, agent, protocol, ask, None)
            if max_steps is not None and self.played >= max_steps:
                return False
            if bool(np.asarray(dones["__all__"])):
                break
        for name, agent, protocol in self._seats():
            protocol.after_episode(self.memories[name][agent], agent, after)
            self.memories[name][agent] = protocol.next_memory(self.memories[name][agent], agent)
        return True

    def _turns(self, view) -> dict[str, int]:
        """Every seat's turn in every layout; the first layout's prompt draws the action."""
        actions: dict[str, int] = {}
        for name, agent, protocol in self._seats():
            prompt = protocol.turn(view, agent, self.memories[name][agent])
            if isinstance(prompt, NoReply):
                actions.setdefault(agent, prompt.action)
                continue
            if agent not in actions:
                actions[agent] = stand_in_action(prompt, self.rng)
            self._answer(name, agent, protocol, prompt, actions[agent])
        return actions

    def _answer(self, name: str, agent: str, protocol, prompt: Prompt, action) -> None:
        """Records ``prompt`` as a call of layout ``name`` and feeds the protocol its stand-in
        reply (``action`` None: a reflect prompt, answered in its own format)."""
        reply = stand_in_reply(protocol, prompt, action, self.rng)
        self.calls[name].append(Call(agent, self.played, prompt.kind, message_text(prompt), reply))
        memory = self.memories[name][agent]
        protocol.after_reply(memory, agent, prompt, reply, protocol.parse_reply(reply, prompt))
