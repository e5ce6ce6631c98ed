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
import numpy as np
from flax import struct

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.types import MoralHazardState
from dilemmax.envs.unrolled import rotate

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
    # Unrolled over the four options: a short reduction is a slow kernel of its own under vmap.
    rank = jnp.zeros(utilities.shape, jnp.int32)
    for j in range(utilities.shape[-1]):
        rank = rank + (utilities[..., j : j + 1] > utilities).astype(jnp.int32)
    return rank


def ring_index(num_agents: int) -> np.ndarray:
    """int[n, n] (static): entry [i, d] is (i + d) mod n, agent i's ring offset d."""
    i = np.arange(num_agents)
    return (i[:, None] + i[None, :]) % num_agents


def encode_all(state: MoralHazardState) -> jax.Array:
    """float32[n, D]: every agent's observation of ``state`` (see the module table)."""
    return jnp.stack(encode_agents(state))


def encode_agents(state: MoralHazardState) -> list[jax.Array]:
    """[float32[D]] * n: each agent's observation of ``state`` (see the module table).

    Each agent's vector is its own concatenation of blocks read at static ring offsets (slices,
    no gathers, no per-agent vmap), so under ``vmap`` an agent's observation is one fused
    computation that XLA can also fuse into its consumer.
    """
    cfg = state.config
    n = cfg.num_agents
    f32 = jnp.float32
    hot = lambda x, k: jax.nn.one_hot(x, k, dtype=f32)

    stage = hot(state.stage, c.NUM_STAGES)
    utilities = cfg.utilities.astype(f32) / c.MAX_UTILITY
    ranks = hot(utility_ranks(cfg.utilities), c.NUM_OPTIONS).reshape(n, -1)
    question = hot(cfg.question, 2)
    worked = state.stage > c.WORK
    local, query = state.chose_local, state.queried
    work = jnp.stack([local, query, worked & ~local & ~query], axis=-1).astype(f32)
    learned = hot(rotate(cfg.unsafe, 1), c.NUM_OPTIONS) * query[:, None]

    # The board: notes become readable once the note stage has been played.
    posted = (state.note_case >= 0) & (state.stage >= c.FINAL)
    option_hot = hot(state.note_option, c.NUM_OPTIONS) * posted[:, None]  # [poster, option]
    case_hot = hot(state.note_case, n)  # [poster, case]
    counts = sum(case_hot[p][:, None] * option_hot[p][None, :] for p in range(n))  # [case, x]
    visible = posted & cfg.provenance_visible  # [poster]
    poster_option = option_hot * posted[:, None]

    contract = jnp.stack(
        [
            jnp.broadcast_to(cfg.w_local, (n,)),
            jnp.broadcast_to(cfg.w_final, (n,)),
            jnp.broadcast_to(cfg.w_team, (n,)),
            jnp.broadcast_to(cfg.cost, (n,)),
            cfg.shares,
            jnp.broadcast_to(cfg.private_reward, (n,)).astype(f32),
            jnp.broadcast_to(cfg.provenance_visible, (n,)).astype(f32),
        ],
        axis=-1,
    ).astype(f32)
    contract = jnp.clip(contract, 0.0, 1.0)

    out = []
    for i in range(n):
        by_offset = rotate(counts, i)  # [case offset, option]
        # Poster rows as seen by i: row d is poster (i + d) mod n, its case as an offset from i.
        case_offset = (rotate(state.note_case, i) - i) % n
        posters = (
            jnp.concatenate([hot(case_offset, n), rotate(poster_option, i)], axis=-1)
            * rotate(visible, i)[:, None]
        )
        out.append(
            jnp.concatenate(
                [
                    stage,
                    utilities[i],
                    ranks[i],
                    question[i],
                    work[i],
                    learned[i],
                    (by_offset > 0).astype(f32).reshape(-1),
                    (by_offset / n).reshape(-1),
                    posters.reshape(-1),
                    contract[i],
                ]
            )
        )
    return out


def encode(state: MoralHazardState, agent: int) -> jax.Array:
    """float32[D]: agent ``agent``'s observation of ``state``."""
    return encode_all(state)[agent]
