"""A :class:`~dilemmax.experiments.design.Plan` as an Inspect task: one sample per episode.

Each part of the plan is played as a ``dilemmax play`` session plays it: the run key
``jax.random.key(seed)`` for every part and rotation, the jobs of
:func:`~dilemmax.envs.rollout.episode_jobs` (configuration-major), the part's seats over the
user's, the part's protocol options over the user's and each seat's own over those
(:func:`dilemmax.llm.play.protocol_with`), every rotation when the part rotates. A sample's id is
the episode id ``dilemmax play`` writes (``<part>|e<episode>``), and its metadata holds the
episode's configuration (index, name and values), the seed and the seating. Inspect's
``--epochs`` plays each episode again from the same key (the env's draws repeat; only the
models' sampling differs).

Model seats: agent ``i`` of the part's seating (before rotation) is played by the model of the
Inspect role ``seat_<i>``, or by the eval's model (``--model``) when no role names one
(``--model-role seat_1=openai/gpt-4o-mini``). A scripted or trained seat a design fixes (or the
user's ``seats`` parameter names) plays inside JAX, as in ``dilemmax play``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig as InspectGenerateConfig

from dilemmax.envs.option_spec import Range
from dilemmax.envs.rollout import episode_jobs, num_configs_of
from dilemmax.envs.seat_spec import is_model_seat  # a model seat: an Inspect role here
from dilemmax.errors import UsageError
from dilemmax.evals.scoring import episode_metrics
from dilemmax.evals.solver import OUTPUT_MODES, Episode, EpisodeSeat, play_episode
from dilemmax.experiments.design import Plan
from dilemmax.llm import sampling
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.play import protocol_with, rotate_seats
from dilemmax.llm.seats import build_seat, check_agents, seat_entries
from dilemmax.llm.session_options import PLAY_SEED

# The sampling options Inspect passes on to its providers, by our field's name.
SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "presence_penalty", "max_tokens", "seed",
    "reasoning_effort", "reasoning_tokens",
)  # fmt: skip


def inspect_sampling(generate: GenerateConfig) -> InspectGenerateConfig:
    """Inspect's generation config of our :class:`~dilemmax.llm.config.GenerateConfig` (its
    sampling fields; None, the provider's default, is left out)."""
    values = {name: getattr(generate, name) for name in SAMPLING_FIELDS}
    return InspectGenerateConfig(**{k: v for k, v in values.items() if v is not None})


PLAY_SAMPLING = inspect_sampling(GenerateConfig())  # dilemmax play's defaults
STEPS = Range("int", 1)  # max_steps


@dataclass(frozen=True)
class _Seat:
    """A seat of a part before rotation: a model (its role) or a JAX policy (its spec)."""

    name: str
    policy: Any = None
    role: str | None = None
    protocol_options: Mapping[str, Any] = field(default_factory=dict)


def role_of(index: int) -> str:
    """The Inspect model role of the part's ``index``-th seat."""
    return f"seat_{index}"


def parse_seats(text: str | Mapping[str, str] | None) -> dict[str, str]:
    """The ``seats`` task parameter: ``"agent_1=scripted:teacher agent_2=scripted:teacher"``
    (entries separated by spaces or semicolons) or a mapping; agent -> seat spec."""
    if text is None or text == "":
        return {}
    if isinstance(text, Mapping):
        return {str(k).strip(): str(v).strip() for k, v in text.items()}
    return seat_entries(str(text).replace(";", " ").split(), "seats")


def _part_seats(part, user_seats: Mapping[str, str], cache: dict) -> list[_Seat]:
    """The part's seats in ``env.agents`` order: its own specs over the user's; the rest models."""
    env = part.env
    check_agents(env, user_seats, "seats")
    for agent, spec in user_seats.items():
        if is_model_seat(spec):
            index = env.agents.index(agent)
            raise UsageError(
                f"seats: {agent}={spec} names a model; in Inspect a seat's model is its role: "
                f"--model-role {role_of(index)}=<provider>/<model>"
            )
    specs = {**user_seats, **part.seats}
    seats = []
    for i, agent in enumerate(env.agents):
        options = dict(part.seat_protocol_options.get(agent, {}))
        spec = specs.get(agent)
        if spec is None or is_model_seat(spec):
            seats.append(_Seat(role_of(i), role=role_of(i), protocol_options=options))
            continue
        # Scripted and trained seats as dilemmax play builds them (checked, one-line errors).
        seat = build_seat(spec, env, cache=cache)
        seats.append(_Seat(spec, seat.policy, protocol_options=options))
    return seats


def _episode_seats(env, seats: Sequence[_Seat], run_options, made) -> tuple[EpisodeSeat, ...]:
    out = []
    for agent, seat in zip(env.agents, seats, strict=True):
        protocol = None if seat.policy is not None else _protocol(env, seat, run_options, made)
        out.append(EpisodeSeat(agent, seat.name, seat.policy, seat.role, protocol))
    return tuple(out)


def _protocol(env, seat: _Seat, run_options, made):
    """A model seat's protocol: the run's options under its own, one instance per set."""
    options = {**run_options, **seat.protocol_options}
    try:
        return protocol_with(env, options, made)
    except NotImplementedError as error:
        raise UsageError(f"{env.name} has no text protocol; a model cannot play it") from error
    except (TypeError, ValueError) as error:
        raise UsageError(f"protocol options {options}: {error}") from error


def plan_episodes(
    plan: Plan,
    seed: int = 0,
    max_steps: int | None = None,
    protocol: Mapping[str, Any] | None = None,
    seats: Mapping[str, str] | None = None,
) -> list[Episode]:
    """Every episode of ``plan`` in ``dilemmax play``'s order (parts, rotations, jobs)."""
    seed = sampling.check_option(seed, PLAY_SEED, "seed")  # as dilemmax play checks --seed
    if max_steps is not None:
        max_steps = sampling.check_option(max_steps, STEPS, "max_steps")
    episodes: list[Episode] = []
    cache: dict = {}
    for part in plan.parts:
        env = part.env
        if part.episodes < 1:
            raise UsageError(f"part {part.name}: episodes must be >= 1, got {part.episodes}")
        run_options = {**(protocol or {}), **part.protocol_options}
        made: dict = {}
        base = _part_seats(part, seats or {}, cache)
        num_steps = env.max_steps if max_steps is None else min(int(max_steps), env.max_steps)
        jobs = episode_jobs(jax.random.key(seed), part.episodes, num_configs_of(part.configs))
        configs = jax.device_get(part.configs)  # sliced per episode on the host
        rotations = env.num_agents if part.rotate else 1
        for shift in range(rotations):
            seating = _episode_seats(env, rotate_seats(base, shift), run_options, made)
            name = part.name if not part.rotate else f"{part.name}/rot{shift}"
            for job in jobs:
                config = None
                if job.config_index is not None:
                    i = job.config_index
                    config = jax.tree.map(lambda x, i=i: x[i : i + 1], configs)
                names = part.config_names
                info = {
                    "env": env.name,
                    "part": name,
                    "episode": job.episode,
                    "config_index": job.config_index,
                    "config_name": names[job.config_index] if names else None,
                    "config": config_values(config),
                    "seed": int(seed),
                    "rotation": shift,
                    "seats": {s.agent: s.name for s in seating},
                    "max_steps": num_steps,
                }
                episode = Episode(name, env, seating, job.key, config, num_steps, info)
                episodes.append(episode)
    return episodes


METADATA_VALUES = 256  # a configuration array longer than this stays out of a sample's metadata


def config_values(config) -> dict[str, Any] | None:
    """A batched (leading axis 1, on the host) configuration's arrays as plain values, by field
    path, for the sample's metadata (large arrays, such as maps, left out); None for a
    configuration the episode samples from its key."""
    if config is None:
        return None
    values = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(config)[0]:
        array = np.asarray(leaf)
        if array.ndim >= 1 and array[0].size <= METADATA_VALUES:
            values[jax.tree_util.keystr(path, simple=True, separator=".")] = array[0].tolist()
    return values


def sample_of(episode: Episode) -> Sample:
    info = episode.info
    config = f" ({info['config_name']})" if info["config_name"] else ""
    text = f"{info['env']} {info['part']} episode {info['episode']}{config}"
    return Sample(input=text, id=f"{episode.part}|e{info['episode']}", metadata=dict(info))


def plan_task(
    plan: Plan,
    name: str,
    seed: int = 0,
    max_steps: int | None = None,
    protocol: Mapping[str, Any] | None = None,
    seats: str | Mapping[str, str] | None = None,
    output_mode: str = "json_schema",
    metadata: Mapping[str, Any] | None = None,
) -> Task:
    """The Inspect task playing every episode of ``plan`` (see the module docstring).

    Args:
        plan: what to play (a design's plan, or one part of a game's default configuration).
        name: the dataset's name (the task is named by its registry entry: dilemmax/<name>).
        seed: the run seed (``dilemmax play --seed``).
        max_steps: stop each episode after this many steps (``--max-steps``).
        protocol: text-protocol options under each part's own (``--protocol``).
        seats: agent -> spec of scripted / trained seats over the models (``--seat``).
        output_mode: how a prompt's JSON schema is asked for: ``json_schema`` (structured
            output, as ``dilemmax play`` does by default), ``json_object`` or ``text``.
        metadata: extra task metadata (the design, its parameters).
    """
    if output_mode not in OUTPUT_MODES:
        raise UsageError(f"output_mode {output_mode!r}: expected one of {OUTPUT_MODES}")
    episodes = plan_episodes(plan, seed, max_steps, protocol, parse_seats(seats))
    by_id = {f"{e.part}|e{e.info['episode']}": e for e in episodes}
    if len(by_id) != len(episodes):
        raise UsageError(f"{name}: two parts of the plan share a name")
    return Task(
        dataset=MemoryDataset([sample_of(e) for e in episodes], name=name),
        solver=play_episode(by_id, output_mode),
        scorer=episode_metrics(),
        config=PLAY_SAMPLING,
        metadata={"seed": int(seed), "parts": [p.name for p in plan.parts], **(metadata or {})},
    )
