"""What a batch of episodes or envs needs in memory, estimated before any of it is built.

Every command that batches episodes or environments (``train``, ``rollout``, ``scenarios
evaluate``, ``redteam play``, ``play``) asks here first and refuses, with the estimate in one
line (:class:`MemoryNeeded`), a size this machine cannot hold: a size nobody can run is answered
in seconds instead of starting the work (or ending in a ``MemoryError`` traceback).

The shapes come from ``jax.eval_shape`` (traced, not run) of one episode or one env reset,
multiplied by the count asked for: the estimate is the memory of what the batch keeps (a lower
bound of its peak), not of its temporaries.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.option_spec import OptionError
from dilemmax.envs.policies import random_policy
from dilemmax.envs.rollout import run_episode

# What one episode's (or one env slot's) record costs where it is kept as Python objects (a
# dict of a few fields and its numbers) rather than as arrays: an estimate, not a measure.
PYTHON_RECORD_BYTES = 1_000


class MemoryNeeded(OptionError):
    """Options each in range whose product cannot fit in this machine's memory."""


def nbytes(x) -> int:
    """Bytes of an array or shape-dtype struct (a float: the product may exceed int64)."""
    return int(np.prod(x.shape, dtype=np.float64)) * np.dtype(x.dtype).itemsize


def tree_bytes(tree) -> int:
    """Bytes of every array leaf of ``tree`` (arrays or ``jax.eval_shape`` structs)."""
    return sum(nbytes(x) for x in jax.tree.leaves(tree) if hasattr(x, "dtype"))


def human_size(n: float) -> str:
    """``1.23 GB``: decimal units, three significant digits."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} EB"  # pragma: no cover - the loop returns


def machine_memory(mesh=None) -> tuple[int, str]:
    """(bytes, description) of the memory a batch may use: the accelerator's ``bytes_limit``
    (times the devices of ``mesh``), else the host's physical memory."""
    device = jax.local_devices()[0]
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        stats = {}
    limit = stats.get("bytes_limit")
    if limit and device.platform != "cpu":
        count = int(mesh.devices.size) if mesh is not None else 1
        return int(limit) * count, f"{count} x {human_size(int(limit))} of {device.platform} memory"
    return host_memory()


def host_memory() -> tuple[int, str]:
    """(bytes, description) of this host's physical memory (where Python objects live)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # a platform without these names
        return 0, "unknown"
    return int(total), f"{human_size(total)} of memory"


def check_fits(needed: float, what: str, lower: str, memory: tuple[int, str] | None = None) -> None:
    """Refuses (:class:`MemoryNeeded`) ``needed`` bytes beyond this machine's memory, in one line:
    ``<what> would need <size>; this machine has <memory>: lower <lower>``. ``what`` says what
    the bytes are, with the sizes that multiply into them."""
    available, described = machine_memory() if memory is None else memory
    if available and needed > available:
        raise MemoryNeeded(
            f"{what} would need {human_size(needed)}; this machine has {described}: lower {lower}"
        )


def episode_bytes(
    env: MultiAgentEnv, policies=None, num_steps: int | None = None
) -> tuple[int, int]:
    """(bytes of one episode as a batch of episodes keeps it: its stacked steps and final state,
    bytes of its metrics alone) under ``policies`` (default: random; a Python policy's shapes
    are a jittable one's)."""
    seats = random_policy if policies is None else policies
    rollout = jax.eval_shape(
        lambda key: run_episode(env, seats, key, None, num_steps), jax.random.key(0)
    )
    metrics = jax.eval_shape(env.episode_metrics, rollout)
    return tree_bytes(rollout), tree_bytes(metrics)


def env_bytes(env: MultiAgentEnv) -> int:
    """Bytes of one environment in a batch: its state and observations after a reset."""
    return tree_bytes(jax.eval_shape(env.reset, jax.random.key(0)))


def check_episodes_fit(
    env: MultiAgentEnv,
    episodes: int,
    what: str,
    lower: str,
    policies=None,
    num_steps: int | None = None,
) -> None:
    """Refuses ``episodes`` episodes played in one batched program (every episode's steps kept
    until its metrics are taken) beyond this machine's memory."""
    per_episode, metrics = episode_bytes(env, policies, num_steps)
    check_fits(
        episodes * (per_episode + metrics),
        f"{what} ({episodes} episode(s) x {human_size(per_episode + metrics)} each)",
        lower,
    )


def check_waves_fit(
    env: MultiAgentEnv, num_envs: int, episodes: int, what: str, lower: str
) -> None:
    """Refuses play in waves of ``num_envs`` environments (each its state, observations and a
    Python slot) of ``episodes`` episodes (each its metrics and a Python record, kept to the end)
    beyond this host's memory."""
    per_env = env_bytes(env) + PYTHON_RECORD_BYTES
    per_episode = episode_bytes(env)[1] + PYTHON_RECORD_BYTES
    check_fits(
        num_envs * per_env + episodes * per_episode,
        f"{what} ({num_envs} env(s) x {human_size(per_env)} and {episodes} episode(s) x "
        f"{human_size(per_episode)} of results)",
        lower,
        host_memory(),
    )
