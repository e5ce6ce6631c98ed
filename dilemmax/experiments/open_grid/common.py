"""What every open_grid design shares: its options, its env, the seeds' configurations, its parts.

A seed is one latent configuration (map layout and hidden rules) and one episode of
``--trials`` trials on it. Seed ``s`` of every design is the configuration episode ``s`` of a
plain ``dilemmax play --episodes N --seed <seed>`` samples, so the designs of one ``--seed``
share their seeds (as the paper's experiments do) and each part can carry its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import jax

from dilemmax import make
from dilemmax.commandline import parse_assignments
from dilemmax.envs.option_declaration import setting
from dilemmax.envs.rollout import episode_keys, job_keys
from dilemmax.errors import UsageError
from dilemmax.experiments.design import DesignParams, Part, SessionOptions

GAMES = ("open_cleanup", "open_harvest")
SEEDS = 3  # [paper] Table 2: seeds per environment (and per team composition)


@dataclass(frozen=True)
class OpenGridParams(DesignParams):
    """The sizes of every open_grid design (the paper's by default) to shrink for a quick look."""

    seeds: int = setting(SEEDS, f"seeds (one configuration and episode each; paper {SEEDS})")
    trials: int | None = setting(None, "trials per episode (paper 5)")
    trial_steps: int | None = setting(None, "steps per trial (paper 400)")
    set: tuple[str, ...] | None = setting(None, "env option key=value (repeatable)", append=True)


def _positive(value: int | None, flag: str) -> int | None:
    if value is not None and value < 1:
        raise UsageError(f"{flag} must be a positive integer, got {value!r}")
    return value


def seeds_of(params: OpenGridParams) -> int:
    return _positive(params.seeds, "--seeds") or SEEDS


_ENVS: dict[tuple, object] = {}


def design_env(game: str, params: OpenGridParams):
    """The game's env with the user's ``--set`` options and the design's sizes; one env per
    option set in a process, so every part (and every design of one run) shares its compiled
    steps."""
    options = parse_assignments(list(params.set or []), "--set")
    trials = _positive(params.trials, "--trials")
    steps = _positive(params.trial_steps, "--trial-steps")
    options.update({"num_trials": trials} if trials else {})
    options.update({"trial_steps": steps} if steps else {})
    key = (game, tuple(sorted((k, repr(v)) for k, v in options.items())))
    if key not in _ENVS:
        if len(_ENVS) >= 8:
            _ENVS.clear()
        _ENVS[key] = make(game, **options)
    return _ENVS[key]


_SAMPLERS: dict[int, tuple] = {}


def seed_configs(env, seed: int, count: int, first: int = 0):
    """Configurations [count] of seeds ``first .. first + count - 1`` (see the module docstring:
    the configuration ``start_episode`` samples from episode ``s``'s key)."""
    if _SAMPLERS.get(id(env), (None,))[0] is not env:
        sample = jax.jit(jax.vmap(lambda k: env.sample_config(episode_keys(k)[0])))
        _SAMPLERS[id(env)] = (env, sample)
    keys = job_keys(jax.random.key(seed), first + count)[first:]
    return _SAMPLERS[id(env)][1](keys)


def seed_names(count: int, first: int = 0) -> list[str]:
    return [f"seed{s}" for s in range(first, first + count)]


def calls_per_episode(env) -> float:
    """Model calls of one episode: every agent every step (an upper bound: a frozen agent or a
    trial that ends early asks fewer), plus one rewrite per agent between trials."""
    return float(env.num_agents * (env.num_trials * env.trial_steps + env.num_trials - 1))


# The tables read each step's events and replies; the session keeps them for a part that asks.
KEEP_STEPS = (
    {"keep_steps": True} if "keep_steps" in {f.name for f in dataclasses.fields(Part)} else {}
)


def team_part(name: str, env, params: OpenGridParams, **kwargs) -> Part:
    """One part playing every seed once: episode ``s`` samples seed ``s``'s configuration."""
    return Part(
        name,
        env,
        episodes=seeds_of(params),
        calls_per_episode=calls_per_episode(env),
        **KEEP_STEPS,
        **kwargs,
    )


def seed_part(name: str, env, run: SessionOptions, seed: int, **kwargs) -> Part:
    """One part playing seed ``seed`` alone (its configuration given, one episode)."""
    return Part(
        name,
        env,
        configs=seed_configs(env, run.seed, 1, first=seed),
        config_names=seed_names(1, first=seed),
        episodes=1,
        calls_per_episode=calls_per_episode(env),
        **KEEP_STEPS,
        **kwargs,
    )


def transcript_of(run: SessionOptions) -> Path | None:
    """The run's transcript (where the replies' modes are read from), if it was written."""
    out = run.out
    path = Path(out) / "transcript.jsonl" if out else None
    return path if path is not None and path.is_file() else None


def per_trial_returns(metrics, episode: int) -> list[float]:
    """Mean per-agent return in each trial of one episode."""
    return [float(v) for v in metrics["return_per_trial"][episode].mean(axis=-1)]
