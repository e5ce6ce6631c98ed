"""A ``lax.cond`` for rare events that stays a branch under ``jax.vmap``.

Under ``jax.vmap`` a ``lax.cond`` whose predicate is batched turns into a select: both branches
run for every element of the batch on every call. That is what makes ``jax.vmap(env.step)`` pay
for a whole reset (layout, spawn draws, observations) on every step although an episode ends
once in hundreds of steps.

:func:`rare_cond` has the semantics of ``lax.cond(pred, true_fn, false_fn, *operands)``. Its
batching rule (``jax.custom_batching.custom_vmap``) runs ``false_fn`` alone on calls where no
element's predicate holds, behind one unbatched ``lax.cond``. On the other calls it runs
``true_fn`` either

* for the whole batch and selects per element (the default, for events that hit a large part
  of the batch at once, such as the end of a 3-step episode), or
* with ``gathered=True``, for the elements that take it only: their rows are gathered into
  batches of ``N // 8`` (:func:`gathered_size`), as many batches as needed, and each element
  reads its result back. A grid game at N = 4,096 where two envs end an episode resets 512
  envs, not 4,096; a step where all of them end runs eight such batches.

Element ``i`` of the result is exactly ``true_fn(operands[i])`` or ``false_fn(operands[i])``
either way, so the random streams and results are those of the plain per-element ``lax.cond``;
only the work skipped differs. This is VecEnv's batch-level reset (and Craftax's optimistic
reset) moved inside the function a user vmaps, so JaxMARL-style code gets it without a wrapper.

Limits: no reverse-mode autodiff through it (no env step needs it), and ``true_fn`` /
``false_fn`` must take everything traced as ``operands`` (they may close over Python values and
constants, not over traced arrays).

The skipping and the ``N // 8`` batches were tuned on a CPU. :data:`BRANCH_BY_BACKEND` chooses
per backend (:class:`BranchPolicy`): skip as above (the default everywhere) or plain JAX's select
(both branches for every element on every call, a ``jnp.where`` of the two: JaxMARL's
auto-reset), and the gather fraction. The results are the same either way; only the work
differs (``benchmarks/gpu/bench.py`` measures them side by side). The policy is read when a
function is traced: set it before jitting, or use :func:`using_branch` around the tracing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

PyTree = Any

# With ``gathered=True`` the rare branch runs on batches of N // GATHER_FRACTION elements, for
# batches of at least MIN_GATHERED_BATCH (below that the whole batch is about as cheap).
GATHER_FRACTION = 8
MIN_GATHERED_BATCH = 16


@dataclasses.dataclass(frozen=True)
class BranchPolicy:
    """How :func:`rare_cond` runs under ``vmap`` on one backend.

    Attributes:
        skip: True: skip ``true_fn`` on calls where no element takes it (and gather, when asked);
            False: plain JAX's select, both branches for every element on every call.
        gather_fraction: with ``gathered=True``, the rare branch runs on batches of
            ``N // gather_fraction`` elements.
    """

    skip: bool = True
    gather_fraction: int = GATHER_FRACTION

    def __post_init__(self):
        if not (isinstance(self.gather_fraction, int) and self.gather_fraction >= 1):
            raise ValueError(f"gather_fraction must be an int >= 1, got {self.gather_fraction!r}")


# backend name (``jax.default_backend()``) -> its policy; a backend not listed takes
# BranchPolicy(). Empty: the CPU-tuned policy everywhere until an accelerator's A/B says otherwise.
BRANCH_BY_BACKEND: dict[str, BranchPolicy] = {}


def branch_policy() -> BranchPolicy:
    """The policy of the default backend."""
    return BRANCH_BY_BACKEND.get(jax.default_backend(), BranchPolicy())


@contextlib.contextmanager
def using_branch(policy: BranchPolicy) -> Iterator[None]:
    """Traces with ``policy`` on the default backend inside the block (benchmarks and tests
    compare policies in one process)."""
    backend = jax.default_backend()
    before = BRANCH_BY_BACKEND.get(backend)
    BRANCH_BY_BACKEND[backend] = policy
    try:
        yield
    finally:
        if before is None:
            BRANCH_BY_BACKEND.pop(backend, None)
        else:
            BRANCH_BY_BACKEND[backend] = before


def gathered_size(axis_size: int) -> int:
    """The size of the batches ``gathered=True`` runs ``true_fn`` on (0: not gathered)."""
    fraction = branch_policy().gather_fraction
    return axis_size // fraction if axis_size >= MIN_GATHERED_BATCH else 0


def _broadcast(tree: PyTree, batched: PyTree, axis_size: int) -> PyTree:
    """Gives every unbatched leaf of ``tree`` a leading batch axis of ``axis_size``."""
    return jax.tree.map(
        lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)), tree, batched
    )


def rare_cond(
    pred: jax.Array,
    true_fn: Callable[..., PyTree],
    false_fn: Callable[..., PyTree],
    *operands,
    gathered: bool = False,
) -> PyTree:
    """``lax.cond(pred, true_fn, false_fn, *operands)``, with ``true_fn`` skipped under ``vmap``
    on calls where no element's ``pred`` holds.

    Args:
        pred: bool[] (a batch of them under vmap).
        true_fn: the rare branch, e.g. a reset.
        false_fn: the common branch, e.g. the identity.
        operands: everything traced the branches read.
        gathered: under vmap, run ``true_fn`` only on the elements whose ``pred`` holds (in
            gathered batches of ``N // 8``) instead of on the whole batch. Pays when few
            elements take the branch on the same call (long episodes); loses when many do.

    Returns:
        The branch's result; under vmap every leaf is batched.
    """
    if not branch_policy().skip:
        return _select_both(jnp.asarray(pred, bool), true_fn, false_fn, operands)

    @custom_vmap
    def branch(pred, *operands):
        return jax.lax.cond(pred, true_fn, false_fn, *operands)

    @branch.def_vmap
    def branch_batched(axis_size, in_batched, pred, *operands):
        pred_batched, *operands_batched = in_batched
        operands = _broadcast(list(operands), operands_batched, axis_size)
        pred = _broadcast(pred, pred_batched, axis_size)
        kept = jax.vmap(false_fn)(*operands)
        size = gathered_size(axis_size) if gathered else 0
        if size:
            out = _gathered(pred, true_fn, operands, kept, size)
        else:

            def mixed():
                taken = jax.vmap(true_fn)(*operands)
                return jax.tree.map(lambda t, k: _select(pred, t, k), taken, kept)

            out = jax.lax.cond(jnp.any(pred), mixed, lambda: kept)
        return out, jax.tree.map(lambda _: True, out)

    return branch(jnp.asarray(pred, bool), *operands)


def _select_both(pred, true_fn, false_fn, operands) -> PyTree:
    """Plain JAX's auto-reset: both branches computed, the result chosen by ``jnp.where``
    (what ``lax.cond`` becomes under vmap), on every call and for every element."""
    taken, kept = true_fn(*operands), false_fn(*operands)
    return jax.tree.map(lambda t, k: jnp.where(pred, t, k), taken, kept)


def _gathered(pred, true_fn, operands, kept, size: int) -> PyTree:
    """``kept`` with element i replaced by ``true_fn(operands[i])`` wherever ``pred[i]``,
    computing ``true_fn`` on batches of ``size`` gathered rows (no batch when no pred holds)."""
    axis_size = pred.shape[0]

    def next_batch(carry):
        out, pending = carry
        # The first `size` pending elements go through true_fn as one batch (padded with the
        # last row, computed and not used); each then reads its result back by its rank, a
        # gather and a select (XLA's CPU backend turns a scatter into a loop).
        rank = jnp.cumsum(pending, dtype=jnp.int32) - 1
        chosen = pending & (rank < size)
        rows = jnp.nonzero(pending, size=size, fill_value=axis_size - 1)[0]  # those of `chosen`
        taken = jax.vmap(true_fn)(*jax.tree.map(lambda x: x[rows], operands))
        slot = jnp.clip(rank, 0, size - 1)
        out = jax.tree.map(lambda o, t: _select(chosen, t[slot], o), out, taken)
        return out, pending & ~chosen

    out, _ = jax.lax.while_loop(lambda carry: jnp.any(carry[1]), next_batch, (kept, pred))
    return out


def _select(pred: jax.Array, on_true: jax.Array, on_false: jax.Array) -> jax.Array:
    """Per-element choice between two batched leaves (``pred`` bool[N])."""
    pred = pred.reshape(pred.shape + (1,) * (on_true.ndim - 1))
    return jnp.where(pred, on_true, on_false)
