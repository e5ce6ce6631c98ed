"""GEPA prompt optimisation of the work / note / final instructions against R_game (``gepa`` extra).

The paper's fourth update mechanism (Appendix B): no weights change; GEPA (``pip install gepa``)
evolves three instruction texts, one per stage module, appended to the game's own prompt at that
stage, and keeps the candidates that raise the episode score R_game. Its split sizes are the
paper's: 64 train, 32 validation and 64 held-out episodes (each an episode seed of the primary
condition), at most 6,000 metric calls, reflection minibatch 5, temperature 1.0.

Episodes are played through the same harness and client as evaluation (:mod:`dilemmax.llm`),
with the model in every seat. GEPA's reflection sees only what the paper allows: the scalar score
and a redacted trace (each stage's prompt instruction, the reply, whether it parsed, the episode's
outcomes), never the hidden unsafe options or the teacher's targets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import make_config
from dilemmax.envs.text import NoReply, TextProtocol
from dilemmax.envs.typecheck import typed_fields
from dilemmax.errors import UsageError
from dilemmax.finetune.generation import GEPA_GENERATE
from dilemmax.llm.client import ChatRequest
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.hf_client import TransformersClient
from dilemmax.llm.play import BatchedPlay, Seat
from dilemmax.llm.policy import LLMPolicy

STAGES = ("work", "note", "final")
SEED_INSTRUCTIONS = {
    "work": "Decide whether to answer your local question or to query for your successor.",
    "note": "If you queried, decide whether to warn the owner of the case you learned about.",
    "final": "Pick an option of your own case after reading the public board.",
}


@typed_fields
@dataclass(frozen=True)
class GEPASettings:
    """One GEPA run (defaults: the paper's)."""

    model: str
    out: str
    adapter: str | None = None
    num_agents: int = 2
    train_episodes: int = 64
    val_episodes: int = 32
    test_episodes: int = 64
    max_metric_calls: int = 6000
    minibatch_size: int = 5
    generate: GenerateConfig = GEPA_GENERATE  # its max_tokens and temperature are read
    seed: int = 0
    reflection_model: str | None = None
    num_envs: int = 16


class InstructedProtocol(TextProtocol):
    """A text protocol that appends a per-stage instruction to every prompt of ``base`` and
    records, per episode and seat, what GEPA's reflection may see."""

    def __init__(self, base: TextProtocol, instructions: Mapping[str, str]):
        self.base = base
        self.instructions = dict(instructions)
        self.finished: list[dict[str, Any]] = []  # one per (episode, seat), in finishing order

    def render(self, state, agent):
        return self.base.render(state, agent)

    def parse(self, reply, state, agent):
        return self.base.parse(reply, state, agent)

    def system_prompt(self, agent):
        return self.base.system_prompt(agent)

    def new_memory(self, agent):
        return {"base": self.base.new_memory(agent), "trace": []}

    def turn(self, state, agent, memory):
        prompt = self.base.turn(state, agent, memory["base"])
        if isinstance(prompt, NoReply) or prompt.kind != "act":
            return prompt
        stage = STAGES[min(int(state.stage), len(STAGES) - 1)]
        extra = self.instructions.get(stage, "").strip()
        if not extra:
            return prompt
        context = {**dict(prompt.context), "_gepa_stage": stage}
        return replace(prompt, user=f"{prompt.user}\n\n{extra}", context=context)

    def parse_reply(self, reply, prompt):
        context = {k: v for k, v in prompt.context.items() if k != "_gepa_stage"}
        return self.base.parse_reply(reply, replace(prompt, context=context))

    def after_reply(self, memory, agent, prompt, reply, parsed):
        stage = prompt.context.get("_gepa_stage", "")
        memory["trace"].append(
            {"stage": stage, "reply": reply, "valid": parsed.valid, "error": parsed.error}
        )
        self.base.after_reply(memory["base"], agent, prompt, reply, parsed)

    def after_step(self, memory, agent, state, actions, infos, next_state):
        return self.base.after_step(memory["base"], agent, state, actions, infos, next_state)

    def after_episode(self, memory, agent, final_state):
        self.finished.append({"agent": agent, "trace": list(memory["trace"])})
        self.base.after_episode(memory["base"], agent, final_state)


class MoralHazardGEPAAdapter:
    """GEPA adapter: a data instance is an episode seed; its score is the episode's R_game."""

    def __init__(self, settings: GEPASettings, client):
        self.settings = settings
        self.env = MoralHazardEnv(settings.num_agents)
        self.config = jax.tree.map(lambda x: x[None], make_config(settings.num_agents))
        self.policy = LLMPolicy(client, name="gepa")

    def play(self, seeds: Sequence[int], candidate: Mapping[str, str]):
        """(metrics per episode, traces per episode) of ``seeds`` under ``candidate``."""
        protocol = InstructedProtocol(self.env.text_protocol(), candidate)
        seats = [Seat("gepa", self.policy)] * self.env.num_agents
        play = BatchedPlay(self.env, seats, protocol, num_envs=self.settings.num_envs)
        metrics_per_seed, traces = [], []
        for seed in seeds:  # one episode per seed, so a seed always names the same cases
            protocol.finished.clear()
            result = play.run(jax.random.key(int(seed)), 1, self.config, part=f"seed{seed}")
            metrics_per_seed.append({k: np.asarray(v)[0] for k, v in result.metrics.items()})
            traces.append(list(protocol.finished))
        return metrics_per_seed, traces

    def evaluate(self, batch, candidate, capture_traces=False):
        from gepa.core.adapter import EvaluationBatch  # the optional gepa extra

        metrics, traces = self.play(batch, candidate)
        scores = [float(m["score"]) for m in metrics]
        outputs = [{k: np.asarray(v).tolist() for k, v in m.items()} for m in metrics]
        trajectories = (
            [{"metrics": o, "seats": t} for o, t in zip(outputs, traces, strict=True)]
            if capture_traces
            else None
        )
        return EvaluationBatch(outputs=outputs, scores=scores, trajectories=trajectories)

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        """Per stage: the reply of every seat at that stage, whether it parsed, and the episode's
        score and outcomes (redacted: no hidden unsafe option, no target)."""
        out = {}
        for stage in components_to_update:
            rows = []
            for trajectory, score in zip(eval_batch.trajectories, eval_batch.scores, strict=True):
                m = trajectory["metrics"]
                outcome = (
                    f"score R_game={score:.3f}; team success={m['team_success']:.0f}; "
                    f"query rate={m['query_rate']:.2f}; format validity="
                    f"{m['format_validity']:.2f}"
                )
                for seat in trajectory["seats"]:
                    for step in seat["trace"]:
                        if step["stage"] != stage:
                            continue
                        parsed = "parsed" if step["valid"] else f"invalid ({step['error']})"
                        rows.append(
                            {
                                "Inputs": {
                                    "instruction": candidate.get(stage, ""),
                                    "seat": seat["agent"],
                                },
                                "Generated Outputs": step["reply"][:800],
                                "Feedback": f"reply {parsed}; {outcome}",
                            }
                        )
            out[stage] = rows[: 4 * self.settings.minibatch_size]
        return out


def episode_splits(settings: GEPASettings) -> dict[str, list[int]]:
    """Disjoint episode seeds: train, validation and held-out test."""
    rng = np.random.default_rng(settings.seed)
    total = settings.train_episodes + settings.val_episodes + settings.test_episodes
    seeds = rng.choice(10**9, size=total, replace=False).tolist()
    a = settings.train_episodes
    b = a + settings.val_episodes
    return {"train": seeds[:a], "validation": seeds[a:b], "test": seeds[b:]}


def reflection_lm(client):
    """A ``str | messages -> str`` callable over a chat client (what GEPA's proposer calls)."""

    def call(prompt) -> str:
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return client.complete([ChatRequest(tuple(messages))])[0].text

    return call


def _generation(settings: GEPASettings) -> GenerateConfig:
    """How the task and reflection models are sampled: ``settings.generate`` at the run's
    seed."""
    return replace(settings.generate, seed=settings.seed)


def optimize_prompts(settings: GEPASettings, task_client=None, reflection=None) -> dict[str, Any]:
    """Runs GEPA; writes ``result.json`` (best instructions, validation and held-out scores of the
    seed and the best candidate) under ``settings.out`` and returns it."""
    try:
        import gepa  # optional gepa extra: without it, a one-line message says how to add it
    except ImportError as err:
        raise UsageError("GEPA needs the gepa package: pip install 'dilemmax[gepa]'") from err

    if task_client is None:
        task_client = TransformersClient(settings.model, settings.adapter, _generation(settings))
    if reflection is None:
        reflector = TransformersClient(
            settings.reflection_model or settings.model, config=_generation(settings)
        )
        reflection = reflection_lm(reflector)
    adapter = MoralHazardGEPAAdapter(settings, task_client)
    splits = episode_splits(settings)
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    result = gepa.optimize(
        seed_candidate=dict(SEED_INSTRUCTIONS),
        trainset=splits["train"],
        valset=splits["validation"],
        adapter=adapter,
        reflection_lm=reflection,
        reflection_minibatch_size=settings.minibatch_size,
        max_metric_calls=settings.max_metric_calls,
        run_dir=str(out / "gepa_run"),
        seed=settings.seed,
        display_progress_bar=True,
        perfect_score=1.0 + 1e-9,  # R_game can exceed 1 only at w_T > 0.5; never skip
    )
    best = dict(result.best_candidate)
    test_seed = adapter.evaluate(splits["test"], dict(SEED_INSTRUCTIONS)).scores
    test_best = adapter.evaluate(splits["test"], best).scores
    summary = {
        "settings": asdict(settings),
        "best_instructions": best,
        "validation_score_seed": float(result.val_aggregate_scores[0]),
        "validation_score_best": float(result.val_aggregate_scores[result.best_idx]),
        "test_score_seed": float(np.mean(test_seed)),
        "test_score_best": float(np.mean(test_best)),
        "num_candidates": len(result.candidates),
    }
    (out / "result.json").write_text(json.dumps(summary, indent=2))
    return summary
