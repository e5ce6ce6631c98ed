"""The focal population of a scenario evaluation, from its seat spec.

A focal population that plays inside JAX is one seat spec (:mod:`dilemmax.envs.seat_spec`) put
in every focal seat: ``trained:<run>[,seed=<k>][,greedy]`` (a run of the full game whose learners
cover the focal seats, or a run trained on one of this game's scenario sets, ``dilemmax train
scenarios``), ``zoo:<game>/<population>[,greedy]``, ``scripted:<name>`` (or the bare name), or
any registered kind that plays inside JAX. Model seats play through the batched harness instead
(:mod:`dilemmax.scenarios.play`).
"""

from __future__ import annotations

from pathlib import Path

from dilemmax.agents import zoo
from dilemmax.agents.trained import TrainedPolicy, run_config
from dilemmax.envs.seat_spec import check_seat, resolve_seat
from dilemmax.errors import UsageError
from dilemmax.scenarios.registry import DEFAULT_GAME


def load_trained(path: Path, seed: int, greedy: bool, env, game: str, what: str):
    """A training run as a focal population, checked against the seats it must play: a run of
    the full game must have learned the focal seats; one trained on a scenario set (``dilemmax
    train scenarios``) must be of this game. ``what`` names it in errors."""
    config = run_config(path)  # which env it trained on decides what it is checked against
    if config["env"] == "scenarios":
        trained_game = (config.get("env_kwargs") or {}).get("game", DEFAULT_GAME)
        if trained_game != game:
            raise UsageError(f"{what}: trained on {trained_game} scenarios, not {game}'s")
        # Checked against the scenario env itself: its focal seats' observations and actions.
        return TrainedPolicy.load(path, seed=seed, greedy=greedy, env=env)
    policy = TrainedPolicy.load(path, seed=seed, greedy=greedy, env=env.game)
    learners = list(getattr(policy, "learners", range(env.game.num_agents)))
    missing = [env.game.agents[i] for i in env.focal if i not in learners]
    if missing:
        raise UsageError(
            f"{what}: it learned seats {[env.game.agents[i] for i in learners]}, not the "
            f"focal seat(s) {missing} of these scenarios"
        )
    return policy


def load_zoo(name: str, env, game: str, greedy: bool):
    """Zoo population ``name`` (digest verified) as a focal population, as :func:`load_trained`."""
    path = zoo.verify(name)
    seed = int(zoo.manifest()[name].get("seed", 0))
    return load_trained(path, seed, greedy, env, game, f"zoo:{name}")


def focal_policy(spec: str, env, game: str):
    """The jittable focal population ``spec`` names: a run (trained on the full game, its
    learners covering the focal seats, or on one of this game's scenario sets), a zoo
    population, a scripted policy, or any other kind that plays inside JAX."""
    seat = check_seat(spec, env.game)
    greedy = bool(seat.options.get("greedy"))
    if seat.kind == "trained":
        seed = seat.options.get("seed", 0)
        return load_trained(Path(seat.target), seed, greedy, env, game, f"focal {spec}")
    if seat.kind == "zoo":
        return load_zoo(seat.target, env, game, greedy)
    return resolve_seat(seat, env.game, where="focal populations")


def zoo_populations(env, game: str) -> dict[str, object]:
    """name -> policy (greedy) of every zoo population of ``game`` (the references' candidates)."""
    entries = zoo.manifest()
    names = [n for n in sorted(entries) if entries[n].get("game", n.split("/")[0]) == game]
    return {f"zoo:{n}": load_zoo(n, env, game, True) for n in names}
