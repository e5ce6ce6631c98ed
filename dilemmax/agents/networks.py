"""Flax networks of the learned agents: encoders, actor and critic heads, masked distributions.

Two encoders cover every dilemmax observation:

- :class:`VectorEncoder`, an MLP over a flat float (or small-integer) vector;
- :class:`GridEncoder`, for egocentric grid views of integer codes ``uint8[H, W, C]``: every
  channel's code is embedded, the embeddings of a cell are concatenated, and a small CNN
  (``conv_features``; none when empty) and a dense layer read the result. Embedding beats
  feeding the codes as numbers (codes are categories, not magnitudes) and beats one-hot planes
  on memory.

The 3x3 convolutions are :class:`Conv3x3`: XLA's convolution on accelerators, and on CPU the
same arithmetic written as patch extraction plus one matmul. XLA:CPU runs convolutions inside a
loop body (a ``lax.scan``, which is where every PPO update runs) 10-20x slower than at top level
(jax-ml/jax#12868); ``benchmarks/results/learning_conv_cpu.md`` has the figures.

Parameters are shared across agents with a one-hot agent-id input (the default), or kept
separate per agent (the trainer then stacks one parameter set per agent on a leading axis).

Shapes below: ``B...`` any leading batch axes, ``A`` the number of agents, ``N`` the number of
actions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# Logit given to illegal actions: finite, so entropy and log-probabilities never produce NaN
# (0 * -inf), yet exp() of it underflows to exactly 0 probability.
ILLEGAL_LOGIT = -1e9


@dataclass(frozen=True)
class NetworkSpec:
    """Hyperparameters of the actor and critic networks.

    Attributes:
        hidden: width of the dense layers.
        num_layers: number of dense hidden layers after the encoder input.
        activation: "tanh" or "relu".
        embed_dim: embedding size per channel code (grid observations).
        conv_features: output channels of each 3x3 convolution (grid observations); empty: the
            embedded view is flattened straight into the dense layer.
        agent_id: feed a one-hot agent index to the networks (useful with shared parameters).
        conv_impl: "xla" (``lax.conv``), "im2col" (patches + matmul) or "auto" (im2col on the
            CPU backend, xla elsewhere). Both compute the same function with the same
            parameters, so a checkpoint trained with one runs with the other.
    """

    hidden: int = 64
    num_layers: int = 2
    activation: str = "tanh"
    embed_dim: int = 8
    conv_features: tuple[int, ...] = field(default=(16, 32))
    agent_id: bool = True
    conv_impl: str = "auto"

    @classmethod
    def from_dict(cls, values: dict) -> NetworkSpec:
        """Builds a spec from a (JSON) dict, ignoring unrelated keys."""
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in values.items() if k in names}
        if "conv_features" in kwargs:
            kwargs["conv_features"] = tuple(kwargs["conv_features"])
        return cls(**kwargs)

    def to_dict(self) -> dict:
        return asdict(self)


def _activation(name: str):
    if name == "tanh":
        return nn.tanh
    if name == "relu":
        return nn.relu
    raise ValueError(f"unknown activation {name!r}; use 'tanh' or 'relu'")


def is_grid(shape: Sequence[int], dtype) -> bool:
    """Whether an observation of ``shape``/``dtype`` is an integer-code grid ``[H, W, C]``."""
    return len(shape) == 3 and jnp.issubdtype(jnp.dtype(dtype), jnp.integer)


def masked_categorical(logits: jax.Array, mask: jax.Array) -> distrax.Categorical:
    """Categorical over the legal actions only.

    Args:
        logits: float32[B..., N].
        mask: bool[B..., N], True for legal actions. A row with no legal action falls back to
            the unmasked logits (the env contract always leaves one legal action; this only keeps
            padding rows finite).
    """
    any_legal = jnp.any(mask, axis=-1, keepdims=True)
    mask = jnp.where(any_legal, mask, True)
    return distrax.Categorical(logits=jnp.where(mask, logits, ILLEGAL_LOGIT))


class VectorEncoder(nn.Module):
    """MLP over a flattened observation. Input: [B..., *obs_shape]; output float32[B..., hidden]."""

    spec: NetworkSpec
    obs_ndim: int
    input_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch = x.shape[: x.ndim - self.obs_ndim]
        x = x.reshape(*batch, -1).astype(jnp.float32) * self.input_scale
        act = _activation(self.spec.activation)
        for _ in range(self.spec.num_layers):
            x = act(
                nn.Dense(self.spec.hidden, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x)
            )
        return x


CONV_IMPLS = ("auto", "xla", "im2col")


def _patches_3x3(x: jax.Array) -> jax.Array:
    """The 3x3 neighbourhood of every cell, zero-padded: float[b, H, W, C] -> float[b, H, W, 9C].

    Feature index ``(3 * i + j) * C + c`` holds channel c of the cell at offset (i - 1, j - 1),
    the row-major flattening of a ``[3, 3, C, F]`` convolution kernel. Built from slices, whose
    gradients are pads and adds (no convolution appears in the backward pass either).
    """
    height, width = x.shape[1:3]
    padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    shifted = [padded[:, i : i + height, j : j + width] for i in range(3) for j in range(3)]
    return jnp.concatenate(shifted, axis=-1)


def resolve_conv_impl(impl: str) -> str:
    """The implementation ("xla" or "im2col") that ``impl`` stands for; "auto" picks by backend."""
    if impl not in CONV_IMPLS:
        raise ValueError(f"unknown conv_impl {impl!r}; use one of {CONV_IMPLS}")
    if impl == "auto":
        return "im2col" if jax.default_backend() == "cpu" else "xla"
    return impl


class Conv3x3(nn.Module):
    """3x3 convolution, stride 1, SAME zero padding: float[b, H, W, C] -> float32[b, H, W, F].

    Parameters ``kernel`` float32[3, 3, C, F] and ``bias`` float32[F], as ``flax.linen.Conv``.
    """

    features: int
    impl: str = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        kernel = self.param(
            "kernel", nn.initializers.lecun_normal(), (3, 3, channels, self.features)
        )
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        if resolve_conv_impl(self.impl) == "im2col":
            y = _patches_3x3(x) @ kernel.reshape(9 * channels, self.features)
        else:
            y = jax.lax.conv_general_dilated(
                x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
        return y + bias


class GridEncoder(nn.Module):
    """Embedding + CNN over integer codes. Input: int[B..., H, W, C]; output float32[B..., hidden].

    Attributes:
        num_codes: one more than the largest code of any channel (the embedding table size; all
            channels share one table, offset per channel so equal codes in different channels do
            not collide).
        num_channels: C.
    """

    spec: NetworkSpec
    num_codes: int
    num_channels: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch = x.shape[:-3]
        height, width, channels = x.shape[-3:]
        x = x.reshape(-1, height, width, channels).astype(jnp.int32)
        offsets = jnp.arange(channels, dtype=jnp.int32) * self.num_codes
        embed = nn.Embed(self.num_codes * self.num_channels, self.spec.embed_dim)
        x = embed(jnp.clip(x, 0, self.num_codes - 1) + offsets)  # [b, H, W, C, D]
        x = x.reshape(x.shape[0], height, width, channels * self.spec.embed_dim)
        act = _activation("relu")
        for i, features in enumerate(self.spec.conv_features):
            # Named as flax.linen.Conv would be, so parameter trees keep their layout.
            x = act(Conv3x3(features, self.spec.conv_impl, name=f"Conv_{i}")(x))
        x = x.reshape(x.shape[0], -1)
        x = act(nn.Dense(self.spec.hidden, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        return x.reshape(*batch, self.spec.hidden)


class Encoder(nn.Module):
    """Chooses the grid or vector encoder from the observation's shape and dtype."""

    spec: NetworkSpec
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_codes: int = 0

    def setup(self):
        if is_grid(self.obs_shape, self.obs_dtype):
            self.body = GridEncoder(self.spec, self.num_codes, self.obs_shape[-1])
        else:
            # Integer vectors (counts, resources) are scaled into [0, 1] by their declared bound.
            scale = 1.0 / (self.num_codes - 1) if self.num_codes > 2 else 1.0
            self.body = VectorEncoder(self.spec, len(self.obs_shape), scale)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.body(x)


def _with_agent_id(spec: NetworkSpec, h: jax.Array, agent_id: jax.Array, num_agents: int):
    """Appends a one-hot agent index (int32[B...]) to features h (float32[B..., F])."""
    if not spec.agent_id:
        return h
    one_hot = jax.nn.one_hot(agent_id, num_agents, dtype=h.dtype)
    return jnp.concatenate([h, jnp.broadcast_to(one_hot, h.shape[:-1] + (num_agents,))], -1)


def _torso(head: nn.Module, obs: jax.Array, agent_id: jax.Array) -> jax.Array:
    """Encoder, agent id and one hidden layer, shared by the actor and the critic.

    Called inside the head's compact ``__call__``, so its layers belong to the head (and keep the
    names Encoder_0 / Dense_0 that checkpoints store).
    """
    h = Encoder(head.spec, head.obs_shape, head.obs_dtype, head.num_codes)(obs)
    h = _with_agent_id(head.spec, h, agent_id, head.num_agents)
    dense = nn.Dense(head.spec.hidden, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))
    return _activation(head.spec.activation)(dense(h))


class Actor(nn.Module):
    """Policy network: (observation, agent index) -> logits float32[B..., N]."""

    spec: NetworkSpec
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int
    num_agents: int
    num_codes: int = 0

    @nn.compact
    def __call__(self, obs: jax.Array, agent_id: jax.Array) -> jax.Array:
        h = _torso(self, obs, agent_id)
        # A small output scale starts the policy near uniform over the legal actions.
        return nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))(h)


class Critic(nn.Module):
    """Value network: (input, agent index) -> float32[B...].

    The input is the agent's own observation (IPPO) or the env's global state (MAPPO); the agent
    index tells a shared centralised critic whose return to predict.
    """

    spec: NetworkSpec
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_agents: int
    num_codes: int = 0

    @nn.compact
    def __call__(self, obs: jax.Array, agent_id: jax.Array) -> jax.Array:
        h = _torso(self, obs, agent_id)
        return nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(h)[..., 0]


def num_codes_of(space) -> int:
    """Embedding table size for an integer Box space (its ``high`` + 1), 0 for float spaces."""
    if not jnp.issubdtype(jnp.dtype(space.dtype), jnp.integer):
        return 0
    return int(np.max(np.asarray(space.high))) + 1


def make_actor(spec: NetworkSpec, obs_space, num_actions: int, num_agents: int) -> Actor:
    """The actor for an env's observation space (a dilemmax ``Box``)."""
    return Actor(
        spec,
        tuple(obs_space.shape),
        jnp.dtype(obs_space.dtype).name,
        int(num_actions),
        int(num_agents),
        num_codes_of(obs_space),
    )


def make_critic(
    spec: NetworkSpec, input_shape, input_dtype, num_agents: int, num_codes: int = 0
) -> Critic:
    """The critic for inputs of ``input_shape``/``input_dtype`` (an observation or global state)."""
    return Critic(
        spec, tuple(input_shape), jnp.dtype(input_dtype).name, int(num_agents), int(num_codes)
    )


# ---------------------------------------------------------------------------------- recurrent
# A recurrent (RL^2) head: the feed-forward torso reads the observation, a GRU cell carries a
# memory across steps (and across trial boundaries), and a dense layer reads the memory out. Each
# step also sees what the agent did and got on the previous step, and whether a trial just ended,
# so the memory can tie actions to their pay-offs (Duan et al. 2016; Wang et al. 2016).
#
# The three stages are separate methods so that the trainer can run the torso on a whole
# rollout [T, B...] at once and scan only the cheap GRU cell over time.


def recurrent_extras_size(num_actions: int) -> int:
    """Width of the per-step extra input: one-hot previous action, previous reward, trial flag."""
    return int(num_actions) + 2


def recurrent_extras(
    prev_action: jax.Array, prev_reward: jax.Array, trial_done: jax.Array, num_actions: int
) -> jax.Array:
    """The extra input float32[B..., N + 2] of a recurrent step.

    Args:
        prev_action: int32[B...], the action taken on the previous step; -1 at an episode start
            (an all-zero one-hot).
        prev_reward: float32[B...], the reward it earned (0 at an episode start).
        trial_done: bool[B...], the previous step ended a trial (the hidden rules stay, the
            board resets).
    """
    one_hot = jax.nn.one_hot(prev_action, num_actions, dtype=jnp.float32)
    return jnp.concatenate(
        [
            one_hot,
            prev_reward.astype(jnp.float32)[..., None],
            trial_done.astype(jnp.float32)[..., None],
        ],
        axis=-1,
    )


class RecurrentNet(nn.Module):
    """Torso + GRU + linear read-out; the actor (``num_outputs = N``) or critic (1) of RL^2.

    One step: ``(memory float32[B..., M], obs [B..., *obs_shape], extras float32[B..., N + 2],
    start bool[B...], agent_id int32[B...]) -> (memory, out float32[B..., num_outputs])``.
    ``start`` marks the first step of an episode: the memory is zeroed before the step, so it
    persists across trials and resets only between episodes.
    """

    spec: NetworkSpec
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_outputs: int
    num_agents: int
    num_codes: int = 0
    memory: int = 64
    output_scale: float = 0.01

    def setup(self):
        self.encoder = Encoder(self.spec, self.obs_shape, self.obs_dtype, self.num_codes)
        init = nn.initializers.orthogonal(np.sqrt(2))
        self.torso = nn.Dense(self.spec.hidden, kernel_init=init)
        self.cell = nn.GRUCell(self.memory)
        self.readout = nn.Dense(
            self.num_outputs, kernel_init=nn.initializers.orthogonal(self.output_scale)
        )

    def features(self, obs: jax.Array, extras: jax.Array, agent_id: jax.Array) -> jax.Array:
        """float32[B..., hidden + N + 2]: the torso's reading of the step, before the memory."""
        h = _with_agent_id(self.spec, self.encoder(obs), agent_id, self.num_agents)
        h = _activation(self.spec.activation)(self.torso(h))
        return jnp.concatenate([h, extras], axis=-1)

    def recur(self, memory: jax.Array, features: jax.Array, start: jax.Array):
        """One GRU step: (memory, float32[B..., M] output)."""
        memory = jnp.where(start[..., None], 0.0, memory)
        return self.cell(memory, features)

    def head(self, y: jax.Array) -> jax.Array:
        return self.readout(y)

    def __call__(self, memory, obs, extras, start, agent_id):
        memory, y = self.recur(memory, self.features(obs, extras, agent_id), start)
        return memory, self.head(y)

    def initial_memory(self, batch_shape: tuple[int, ...] = ()) -> jax.Array:
        return jnp.zeros((*batch_shape, self.memory), jnp.float32)


def unroll(net: RecurrentNet, params, memory, obs, extras, start, agent_id):
    """``net`` over a time-major sequence, from ``memory`` float32[B..., M].

    Args:
        obs: [T, B..., *obs_shape]; extras: float32[T, B..., N + 2]; start: bool[T, B...];
        agent_id: int32[T, B...].

    Returns:
        (final memory float32[B..., M], outputs float32[T, B..., num_outputs]). The torso and
        read-out run on all T steps at once; only the GRU cell is scanned.
    """
    feats = net.apply(params, obs, extras, agent_id, method=RecurrentNet.features)

    def step(m, inputs):
        f, s = inputs
        return net.apply(params, m, f, s, method=RecurrentNet.recur)

    memory, ys = jax.lax.scan(step, memory, (feats, start))
    return memory, net.apply(params, ys, method=RecurrentNet.head)


def make_recurrent(
    spec: NetworkSpec,
    input_shape,
    input_dtype,
    num_outputs: int,
    num_agents: int,
    num_codes: int,
    memory: int,
    output_scale: float = 0.01,
) -> RecurrentNet:
    """A recurrent actor (``num_outputs`` = actions; a small ``output_scale`` starts it near
    uniform) or critic (1 output, scale 1) over inputs of that shape."""
    return RecurrentNet(
        spec,
        tuple(input_shape),
        jnp.dtype(input_dtype).name,
        int(num_outputs),
        int(num_agents),
        int(num_codes),
        int(memory),
        float(output_scale),
    )


def make_policy_net(
    spec: NetworkSpec,
    obs_space,
    num_actions: int,
    num_agents: int,
    recurrent: bool = False,
    memory: int = 64,
) -> Actor | RecurrentNet:
    """The actor of a training run: the one builder the trainer and ``TrainedPolicy.load`` share,
    so a loaded checkpoint always meets the network it was trained with."""
    if not recurrent:
        return make_actor(spec, obs_space, num_actions, num_agents)
    return make_recurrent(
        spec,
        obs_space.shape,
        obs_space.dtype,
        num_actions,
        num_agents,
        num_codes_of(obs_space),
        memory,
    )
