"""Timing and reporting helpers shared by the benchmark scripts (`python benchmarks/<name>.py`).

Every figure follows one rule: compile once (timed apart), then take the best of ``repeats``
timed calls, each blocked on with ``jax.block_until_ready``.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp

from dilemmax.envs import fastrandom

# The k-th legal action is found by a binary search over a bit-packed mask (below), which needs
# the whole action space in one uint32.
MAX_PACKED_ACTIONS = 32


def uniform_legal_actions(key: jax.Array, masks: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """agent -> int32[...]: a uniformly random legal action for each agent (and env of a batch).

    Args:
        key: one PRNG key for the whole batch.
        masks: agent -> bool[..., A], the legal actions (any leading batch shape, the same for
            every agent).

    One ``jax.random.bits`` uint32 per (env, agent) is all the randomness: with ``c`` legal
    actions, ``k = bits mod c`` picks the k-th legal one. The modulo bias is below ``c / 2^32``
    in relative terms (under 1e-8 for every action space here). The k-th legal action is read
    from the mask packed into one uint32, by a five-step binary search on population counts, so
    no cumulative sum or argmax over the action axis is needed (XLA's CPU cumsum, a
    reduce-window, cost more than a whole env step; see benchmarks/results/fast_envs_profile.md).
    An all-False mask gives action 0. Action spaces wider than 32 fall back to a cumulative sum.
    """
    agents = list(masks)
    stacked = jnp.stack([masks[a] for a in agents], axis=-2)  # bool[..., n, A]
    bits = fastrandom.bits(key, stacked.shape[:-1])  # jax.random.bits, unrolled
    if stacked.shape[-1] > MAX_PACKED_ACTIONS:
        count = jnp.sum(stacked, axis=-1, dtype=jnp.uint32)
        k = bits % jnp.maximum(count, 1)
        rank = jnp.cumsum(stacked, axis=-1, dtype=jnp.uint32)
        index = jnp.sum(rank <= k[..., None], axis=-1, dtype=jnp.uint32)
    else:
        index, count = _kth_set_bit(_pack(stacked), bits)
    index = jnp.where(count > 0, index, 0).astype(jnp.int32)
    return {a: index[..., i] for i, a in enumerate(agents)}


def _pack(mask: jax.Array) -> jax.Array:
    """uint32[...]: bit j set where ``mask[..., j]`` (bool[..., A], A <= 32)."""
    weights = jnp.uint32(1) << jnp.arange(mask.shape[-1], dtype=jnp.uint32)
    return jnp.sum(jnp.where(mask, weights, jnp.uint32(0)), axis=-1, dtype=jnp.uint32)


def _kth_set_bit(packed: jax.Array, bits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(index of set bit number ``bits mod count`` of ``packed``, count of set bits).

    The index is the largest p with fewer than k + 1 set bits below p; five halving steps find
    it (p < 32). Everything is elementwise, so XLA fuses it into one loop.
    """
    count = jax.lax.population_count(packed)
    k = bits % jnp.maximum(count, 1)
    index = jnp.zeros_like(packed)
    for step in (16, 8, 4, 2, 1):
        trial = index + step
        below = jax.lax.population_count(packed & ((jnp.uint32(1) << trial) - 1))
        index = jnp.where(below <= k, trial, index)
    return index, count


def _compile(run: Callable, key: jax.Array) -> tuple[Callable, float]:
    """(callable to time, seconds spent compiling it).

    A jitted ``run`` is compiled ahead of time, so the seconds are compilation alone; any other
    callable is timed on its first call, which then counts one run as well.
    """
    start = time.perf_counter()
    if hasattr(run, "lower"):
        run = run.lower(key).compile()
    else:
        jax.block_until_ready(run(key))
    return run, time.perf_counter() - start


def time_compiled(run: Callable[[jax.Array], object], repeats: int = 3) -> tuple[float, float]:
    """(compile seconds, best run seconds) of a jitted ``run(key)``; key 0 is the warm-up call."""
    warm_up = jax.random.key(0)
    run, compile_s = _compile(run, warm_up)
    jax.block_until_ready(run(warm_up))
    best = float("inf")
    for r in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(r + 1)))
        best = min(best, time.perf_counter() - start)
    return compile_s, best


def machine() -> str:
    """The device, core count, processor and jax version the figures come from."""
    device = jax.devices()[0]
    cpu = platform.processor() or platform.machine()
    return (
        f"{device.platform} ({device.device_kind}), {os.cpu_count()} CPU cores, {cpu}; "
        f"jax {jax.__version__}"
    )


def load() -> str:
    """The 1 / 5 / 15-minute load averages, to judge how quiet the machine was."""
    return "load average {:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(text: str, out: Path | None) -> None:
    """Print a results table and, when ``out`` is given, write it there."""
    text = text.rstrip("\n") + "\n"
    print(text, end="")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"written to {out}")
