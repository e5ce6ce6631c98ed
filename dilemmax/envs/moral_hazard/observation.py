"""The observation array of one agent: its layout, how it is built, and how policies read it.

Everything is float32 in [0, 1]. Cases and posters are listed by ring offset from the observing
agent (offset 0 = its own case, 1 = its successor's), so the same entry means the same thing
in every seat. Layout (``n`` agents, ``D = 40 + 12 n + n^2``):

==============  ==========  ===============================================================
block           shape       content
==============  ==========  ===============================================================
stage           [4]         one-hot: work, note, final, done
utilities       [4]         own case's utilities / 13
ranks           [4, 4]      one-hot utility rank of each own option (rank 0 = highest)
question        [2]         own local question: highest / lowest
work            [3]         own work move once made: LOCAL / QUERY / no move
learned         [4]         one-hot unsafe option of the successor's case (after a query)
warned          [n, 4]      1 where some note names case (i + d) mod n, option x
warn_share      [n, 4]      number of such notes / n
posters         [n, n + 4]  visible provenance only: the note of agent (i + d') mod n as
                            (case-offset one-hot [n], option one-hot [4]); zeros if anonymous
contract        [7]         w_L, w_F, w_T, k, own share alpha_i, private-reward flag,
                            provenance-visible flag (each clipped to [0, 1]; ``make_config``
                            rejects values outside it, so clipping never changes a number)
==============  ==========  ===============================================================

The board blocks are filled from the final stage on (notes are posted at the note stage and
read at the final stage). The unsafe-option mapping is not observed: it is the hidden rule a
learner may or may not infer from utilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.types import MoralHazardState

CONTRACT_SIZE = 7


@dataclass(frozen=True)
class ObsLayout:
    """Static slices of the observation vector for ``num_agents`` agents."""

    num_agents: int

    @property
    def blocks(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        n = self.num_agents
        return (
            ("stage", (c.NUM_STAGES,)),
            ("utilities", (c.NUM_OPTIONS,)),
            ("ranks", (c.NUM_OPTIONS, c.NUM_OPTIONS)),
            ("question", (2,)),
            ("work", (3,)),
            ("learned", (c.NUM_OPTIONS,)),
            ("warned", (n, c.NUM_OPTIONS)),
            ("warn_share", (n, c.NUM_OPTIONS)),
            ("posters", (n, n + c.NUM_OPTIONS)),
            ("contract", (CONTRACT_SIZE,)),
        )

    @property
    def size(self) -> int:
        return sum(_prod(shape) for _, shape in self.blocks)

    def slices(self) -> dict[str, tuple[slice, tuple[int, ...]]]:
        out, start = {}, 0
        for name, shape in self.blocks:
            out[name] = (slice(start, start + _prod(shape)), shape)
            start += _prod(shape)
        return out

    @staticmethod
    def from_size(size: int) -> ObsLayout:
        """The layout whose vector has ``size`` entries (size = 40 + 12 n + n^2)."""
        n = round((size - 4) ** 0.5) - 6
        layout = ObsLayout(n)
        if layout.size != size:
            raise ValueError(f"{size} is not the observation size of any number of agents")
        return layout


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


@struct.dataclass
class ObsView:
    """An observation vector split into its blocks (shapes as in the module table)."""

    stage: jax.Array
    utilities: jax.Array
    ranks: jax.Array
    question: jax.Array
    work: jax.Array
    learned: jax.Array
    warned: jax.Array
    warn_share: jax.Array
    posters: jax.Array
    contract: jax.Array

    @property
    def num_agents(self) -> int:
        return self.warned.shape[-2]

    @property
    def stage_index(self) -> jax.Array:
        """int32[]: the stage (0 work, 1 note, 2 final, 3 done)."""
        return jnp.argmax(self.stage).astype(jnp.int32)

    @property
    def queried(self) -> jax.Array:
        """bool[]: the agent queried at the work stage."""
        return self.work[1] > 0.5

    @property
    def own_share(self) -> jax.Array:
        return self.contract[4]


def decode(array: jax.Array) -> ObsView:
    """Splits an observation vector (float32[D]) into an :class:`ObsView`."""
    layout = ObsLayout.from_size(array.shape[-1])
    parts = {
        name: array[..., sl].reshape(array.shape[:-1] + shape)
        for name, (sl, shape) in layout.slices().items()
    }
    return ObsView(**parts)


def utility_ranks(utilities: jax.Array) -> jax.Array:
    """int32[..., 4]: rank of each option's utility within its case (0 = highest)."""
    greater = utilities[..., None, :] > utilities[..., :, None]
    return jnp.sum(greater, axis=-1).astype(jnp.int32)


def ring_roll(x: jax.Array, shift: jax.Array) -> jax.Array:
    """Rows of ``x`` ([n, ...]) reordered so row d is row (shift + d) mod n."""
    n = x.shape[0]
    return x[(shift + jnp.arange(n)) % n]


def encode(state: MoralHazardState, agent: int) -> jax.Array:
    """float32[D]: agent ``agent``'s observation of ``state`` (see the module table)."""
    cfg = state.config
    n = cfg.num_agents
    f32 = jnp.float32
    stage = jax.nn.one_hot(state.stage, c.NUM_STAGES, dtype=f32)
    utilities = cfg.utilities[agent].astype(f32) / c.MAX_UTILITY
    ranks = jax.nn.one_hot(utility_ranks(cfg.utilities[agent]), c.NUM_OPTIONS, dtype=f32)
    question = jax.nn.one_hot(cfg.question[agent], 2, dtype=f32)

    worked = state.stage > c.WORK
    local, query = state.chose_local[agent], state.queried[agent]
    work = jnp.stack([local, query, worked & ~local & ~query]).astype(f32)
    successor = (agent + 1) % n
    learned = jax.nn.one_hot(cfg.unsafe[successor], c.NUM_OPTIONS, dtype=f32) * query

    # The board: notes become readable once the note stage has been played.
    posted = (state.note_case >= 0) & (state.stage >= c.FINAL)
    offsets = (state.note_case - agent) % n  # case named by each poster, as an offset from me
    note_hot = (
        jax.nn.one_hot(offsets, n, dtype=f32)[:, :, None]
        * jax.nn.one_hot(state.note_option, c.NUM_OPTIONS, dtype=f32)[:, None, :]
        * posted[:, None, None]
    )  # [poster, case offset, option]
    counts = jnp.sum(note_hot, axis=0)
    warned = (counts > 0).astype(f32)
    warn_share = counts / n
    poster_rows = (
        jnp.concatenate(
            [
                jax.nn.one_hot(offsets, n, dtype=f32),
                jax.nn.one_hot(state.note_option, c.NUM_OPTIONS, dtype=f32),
            ],
            axis=-1,
        )
        * (posted & cfg.provenance_visible)[:, None]
    )
    posters = ring_roll(poster_rows, jnp.int32(agent))

    contract = jnp.clip(
        jnp.stack(
            [
                cfg.w_local,
                cfg.w_final,
                cfg.w_team,
                cfg.cost,
                cfg.shares[agent],
                cfg.private_reward.astype(f32),
                cfg.provenance_visible.astype(f32),
            ]
        ).astype(f32),
        0.0,
        1.0,
    )
    return jnp.concatenate(
        [
            stage,
            utilities,
            ranks.reshape(-1),
            question,
            work,
            learned,
            warned.reshape(-1),
            warn_share.reshape(-1),
            posters.reshape(-1),
            contract,
        ]
    )
