"""A ``lax.cond`` for rare events that stays a branch under ``jax.vmap``.

Under ``jax.vmap`` a ``lax.cond`` whose predicate is batched turns into a select: both branches
run for every element of the batch on every call. That is what makes ``jax.vmap(env.step)`` pay
for a whole reset (layout, spawn draws, observations) on every step although an episode ends
once in hundreds of steps.

:func:`rare_cond` has the semantics of ``lax.cond(pred, true_fn, false_fn, *operands)``. Its
batching rule (``jax.custom_batching.custom_vmap``) runs the rare branch for the whole batch,
and selects per element, only on calls where some element's predicate holds, behind one
unbatched ``lax.cond``; on every other call it runs ``false_fn`` alone. Element ``i`` of the
result is exactly ``true_fn(operands[i])`` or ``false_fn(operands[i])``, so the random streams
and results are those of the plain per-element ``lax.cond``; only the work skipped differs.
This is VecEnv's batch-level reset (and Craftax's optimistic reset) moved inside the function a
user vmaps, so JaxMARL-style code gets it without a wrapper.

Limits: no reverse-mode autodiff through it (no env step needs it), and ``true_fn`` /
``false_fn`` must take everything traced as ``operands`` (they may close over Python values and
constants, not over traced arrays).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

PyTree = Any


def _broadcast(tree: PyTree, batched: PyTree, axis_size: int) -> PyTree:
    """Gives every unbatched leaf of ``tree`` a leading batch axis of ``axis_size``."""
    return jax.tree.map(
        lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)), tree, batched
    )


def rare_cond(
    pred: jax.Array, true_fn: Callable[..., PyTree], false_fn: Callable[..., PyTree], *operands
) -> PyTree:
    """``lax.cond(pred, true_fn, false_fn, *operands)``, with ``true_fn`` skipped under ``vmap``
    on calls where no element's ``pred`` holds.

    Args:
        pred: bool[] (a batch of them under vmap).
        true_fn: the rare branch, e.g. a reset.
        false_fn: the common branch, e.g. the identity.
        operands: everything traced the branches read.

    Returns:
        The branch's result; under vmap every leaf is batched.
    """

    @custom_vmap
    def branch(pred, *operands):
        return jax.lax.cond(pred, true_fn, false_fn, *operands)

    @branch.def_vmap
    def branch_batched(axis_size, in_batched, pred, *operands):
        pred_batched, *operands_batched = in_batched
        operands = _broadcast(list(operands), operands_batched, axis_size)
        pred = _broadcast(pred, pred_batched, axis_size)

        def common():
            return jax.vmap(false_fn)(*operands)

        def mixed():
            taken = jax.vmap(true_fn)(*operands)
            kept = jax.vmap(false_fn)(*operands)
            return jax.tree.map(lambda t, k: _select(pred, t, k), taken, kept)

        out = jax.lax.cond(jnp.any(pred), mixed, common)
        return out, jax.tree.map(lambda _: True, out)

    return branch(jnp.asarray(pred, bool), *operands)


def _select(pred: jax.Array, on_true: jax.Array, on_false: jax.Array) -> jax.Array:
    """Per-element choice between two batched leaves (``pred`` bool[N])."""
    pred = pred.reshape(pred.shape + (1,) * (on_true.ndim - 1))
    return jnp.where(pred, on_true, on_false)
