"""The environment contract shared by every dilemmax game.

The API is JaxMARL's (``reset``/``step`` with dicts keyed by agent name, ``dones["__all__"]``,
per-agent spaces), extended with what the papers' sweeps need: a configuration pytree carried in
the state (``sample_config`` / ``reset_to``), legal-action masks, and per-episode metrics computed
in JAX from a rollout.

Shapes below use ``A`` for the number of agents and ``T`` for the number of time steps.
"""

from __future__ import annotations

import abc
import functools
import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs import fastrandom
from dilemmax.envs.metrics import BASE_METRIC_AXES, Axes
from dilemmax.envs.option_declaration import options_section, signature_options
from dilemmax.envs.option_spec import OptionSpec
from dilemmax.envs.rare import rare_cond
from dilemmax.envs.spaces import Space, jaxmarl_space

PyTree = Any
AgentDict = dict[str, jax.Array]


def typed_key(key: jax.Array) -> jax.Array:
    """``key`` as a typed PRNG key (``jax.random.key``), whichever kind it was given as.

    Legacy ``jax.random.PRNGKey`` keys (uint32[2]) are wrapped; typed keys pass through. Public
    functions that split a key and then reshape the result call this first, so both kinds work.
    A batch of legacy keys (uint32[..., 2]) becomes a batch of typed keys.
    """
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if key.dtype != jnp.uint32 or key.ndim < 1 or key.shape[-1] != 2:
        raise TypeError(
            f"expected a PRNG key (jax.random.key or jax.random.PRNGKey), got an array of "
            f"dtype {key.dtype} and shape {key.shape}"
        )
    return jax.random.wrap_key_data(key)


def subkey(key: jax.Array, index: int) -> jax.Array:
    """``jax.random.split(key)[index]`` (a typed key), computing only that subkey.

    With the default threefry implementation and ``jax_threefry_partitionable`` (JAX's default),
    the i-th key of a split is one hash of ``(0, i)``, which is exactly ``fold_in(key, i)``; a
    batch then pays one hash per subkey it uses instead of both. Other implementations and
    settings get the split itself.
    """
    key = typed_key(key)
    if fastrandom.partitionable_threefry(key):
        # The hash unrolled (XLA's CPU loop of it cost 5% of a consequence step at 65,536 envs).
        return fastrandom.fold_in(key, index)
    return jax.random.split(key)[index]


def scalar_actions(actions: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """agent -> int32[]: accepts the ``(1,)``-shaped actions JaxMARL's batching produces."""
    out = {}
    for agent, action in actions.items():
        action = jnp.asarray(action)
        if action.ndim > 0 and action.size == 1:
            action = action.reshape(())
        out[agent] = action
    return out


def agent_infos(infos: Mapping[str, Any], num_agents: int) -> dict[str, jax.Array]:
    """The per-agent layout of ``infos``: every leaf a ``[num_agents]`` array.

    Scalars (one value for the whole game: ``trial_done``, ``score``) are repeated for each agent;
    ``[num_agents]`` leaves are kept; leaves with any other shape (a beam's cells, a tree per
    orchard cell) are left out. This is the layout JaxMARL's wrappers and baselines batch (they
    reshape every info leaf to ``num_envs * num_agents``). Nested dicts are flattened into
    ``"outer/inner"`` keys.
    """
    out: dict[str, jax.Array] = {}
    for name, value in infos.items():
        if isinstance(value, Mapping):
            for inner, leaf in agent_infos(value, num_agents).items():
                out[f"{name}/{inner}"] = leaf
            continue
        value = jnp.asarray(value)
        if value.shape == ():
            out[name] = jnp.broadcast_to(value, (num_agents,))
        elif value.shape == (num_agents,):
            out[name] = value
    return out


@struct.dataclass
class Rollout:
    """One episode, stacked over time, as the metrics read it.

    Every leaf has a leading time axis of length ``T`` (``env.max_steps`` in the JAX fast path, the
    played length in the Python arena).

    Attributes:
        actions: agent -> int32[T], the actions passed to ``step_env``.
        rewards: agent -> float32[T].
        dones: agent -> bool[T], plus ``"__all__"``.
        infos: the env's ``infos`` dict, each leaf with a leading ``T`` axis.
        valid: bool[T], True for the steps that were played (up to and including the terminal
            one); steps after the end are padding and must be ignored.
        final_state: the env state right after the terminal step (no auto-reset), unbatched.
    """

    actions: AgentDict
    rewards: AgentDict
    dones: AgentDict
    infos: dict[str, Any]
    valid: jax.Array
    final_state: PyTree


def _default_to_first_agent(method):
    @functools.wraps(method)
    def space(self, agent: str | None = None):
        return method(self, self.agents[0] if agent is None else agent)

    space.defaults_to_first_agent = True
    return space


class SweepPart(NamedTuple):
    """One part of the grid a game's paper sweeps (:meth:`MultiAgentEnv.sweep`)."""

    name: str  # the part's name in a run ("grid", "n=3")
    num_agents: int  # the env that plays it has this many agents (the game's other options alike)
    configs: Any  # the batched configurations (every leaf with a leading axis C)
    config_names: list[str]  # one name per configuration (its group in a run's summary)


def _declare_options(cls: type) -> None:
    """``cls.option_specs`` from its constructor's signature, and the ``Args:`` of its own
    docstring from the same declarations (a class without a docstring shows its parent's)."""
    if "option_specs" in cls.__dict__:
        raise TypeError(
            f"{cls.__qualname__}: declare each option in the constructor's signature, "
            "`name: Annotated[type, Option(meaning, **range)] = default`, not in option_specs"
        )
    options = signature_options(cls.__init__)
    cls.option_specs = MappingProxyType({name: o.spec for name, o in options.items()})
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    # A docstring with an Args: of its own (an env written outside dilemmax) is left as it is;
    # tests/test_one_home.py holds dilemmax's envs to the declarations.
    declared = any(option.doc for option in options.values())
    if doc and declared and "\nArgs:\n" not in f"\n{doc}\n":
        cls.__doc__ = f"{doc}\n\n{options_section(options)}\n"


class MultiAgentEnv(abc.ABC):
    """Base class of every environment.

    Subclasses implement ``sample_config``, ``reset_to``, ``step_env``, ``get_obs``,
    ``action_mask``, ``observation_space`` and ``action_space``; everything else has a default.

    Static options (number of agents, map size, reward mode) are constructor keyword arguments
    and may change shapes; everything a paper sweeps lives in the configuration pytree, so a grid
    of configurations runs as one ``jax.vmap``.

    Class attributes:
        max_steps: an upper bound on the number of ``step_env`` calls in one episode; the JAX fast
            path scans this many steps.
        render_modes: the modes ``render`` accepts.
        obs_from_state: True when every observation ``reset_to`` and ``step_env`` return is
            ``get_obs`` of the state they return; ``step`` then resets the state alone and
            builds the observation once, after the auto-reset (the same values, less work
            under ``vmap``).
        gathered_resets: True for games whose episodes are long next to a batch step, so that
            few envs of a batch end one on the same step: ``jax.vmap(env.step)`` then resets
            only the envs that ended, gathered into batches of N // 8 (``rare_cond``'s
            ``gathered``), instead of resetting all N and selecting. False (the default) suits
            games that end an episode every few steps.
        option_specs: constructor option -> the values it allows (its range, choices, list
            length), read from the constructor's signature when the class is defined: each
            option is declared once, as ``name: Annotated[type, Option(meaning, **range)] =
            default`` (:class:`~dilemmax.envs.option_declaration.Option`), and a parameter
            without an ``Option`` is checked against its annotation alone. Not written by hand: the
            class docstring's ``Args:`` is made from the same declarations.
            :func:`dilemmax.envs.options.check_env_options` checks them, and
            ``check_options_together`` the constraints between options.
        renamed_options: an option's old name -> its name now. ``dilemmax.make``, ``--set``
            and saved configs (run folders, transcripts) still accept the old name, with one
            deprecation line on stderr (:func:`dilemmax.envs.registry.current_option_names`).
        version: the game's version, N in its id ``<game>-vN``. It is bumped by any change that
            could change what an agent learns or what a recorded result means: dynamics,
            rewards, observations, action meanings, or an option's meaning or default
            (docs/versions.md). Run folders, transcripts, zoo entries and scenario hashes
            record it, and a trained agent made under another version is refused.
        evaluation_options: the constructor options an evaluation takes unless told otherwise
            (a game with held-out content: ``{"split": "held_out"}``): the trainer's evaluation
            env and language-model play start from them.
        training_defaults: the trainer's defaults for this game (``TrainConfig`` field ->
            value, over the dataclass's own, under the user's ``--set``), sized so the default
            run finishes on a laptop CPU and shows learning. ``train_grid`` / ``eval_grid`` name
            a builder of :meth:`config_grids` by the method itself.
        metric_axes: metric -> its axes (``dilemmax.envs.metrics.SCALAR``, ``PER_AGENT``,
            ``PER_TRIAL``, ``PER_TRIAL_AGENT``, ...), for every metric ``episode_metrics``
            returns: declared beside it (a game's ``metrics.METRIC_AXES``) and read by every
            report, which never guesses a metric's meaning from its shape.
    """

    max_steps: int = 1
    render_modes: tuple[str, ...] = ("ansi",)
    obs_from_state: bool = False
    gathered_resets: bool = False
    option_specs: ClassVar[Mapping[str, OptionSpec]] = {}
    renamed_options: ClassVar[Mapping[str, str]] = {}
    version: ClassVar[int] = 0
    evaluation_options: ClassVar[Mapping[str, Any]] = {}
    training_defaults: ClassVar[Mapping[str, Any]] = {}
    metric_axes: ClassVar[Mapping[str, Axes]] = BASE_METRIC_AXES

    def __init_subclass__(cls, **kwargs):
        """Reads the options the constructor declares (``option_specs`` and the docstring's
        ``Args:``), and lets ``observation_space()`` / ``action_space()`` default to the first
        agent, as JaxMARL's single-space scripts (``ippo_ff_overcooked.py``) call them."""
        super().__init_subclass__(**kwargs)
        _declare_options(cls)
        for name in ("observation_space", "action_space"):
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "defaults_to_first_agent", False):
                setattr(cls, name, _default_to_first_agent(method))

    def __init__(self, num_agents: int, agents: list[str] | None = None):
        self.num_agents = int(num_agents)
        self.agents = (
            list(agents) if agents is not None else [f"agent_{i}" for i in range(num_agents)]
        )
        if len(self.agents) != self.num_agents:
            raise ValueError(f"got {len(self.agents)} agent names for {self.num_agents} agents")
        self.agent_index = {name: i for i, name in enumerate(self.agents)}

    @classmethod
    def check_options_together(cls, values: Mapping[str, Any]) -> None:
        """Raises ValueError when constructor options that each fit their spec do not fit
        together. ``values`` holds the options given (each already checked alone, as the caller
        passed it), so a check needs all of its options among them. Default: none."""
        return None

    # ------------------------------------------------------------------ to implement
    @abc.abstractmethod
    def sample_config(self, key: jax.Array) -> PyTree:
        """Draws the latent configuration (context, rule, layout, payoff weights) of an episode."""

    @abc.abstractmethod
    def reset_to(self, key: jax.Array, config: PyTree) -> tuple[AgentDict, PyTree]:
        """Starts an episode on ``config``; returns ``(obs, state)``."""

    @abc.abstractmethod
    def step_env(
        self, key: jax.Array, state: PyTree, actions: Mapping[str, jax.Array]
    ) -> tuple[AgentDict, PyTree, AgentDict, AgentDict, dict]:
        """One transition without auto-reset: ``(obs, state, rewards, dones, infos)``."""

    @abc.abstractmethod
    def get_obs(self, state: PyTree) -> AgentDict:
        """Each agent's observation of ``state``."""

    @abc.abstractmethod
    def action_mask(self, state: PyTree) -> AgentDict:
        """agent -> bool[num_actions]: the actions that are legal in ``state``."""

    @abc.abstractmethod
    def observation_space(self, agent: str) -> Space: ...

    @abc.abstractmethod
    def action_space(self, agent: str) -> Space: ...

    # ------------------------------------------------------------------ provided
    def reset(self, key: jax.Array) -> tuple[AgentDict, PyTree]:
        """Samples a configuration and starts an episode on it (typed or legacy ``key``)."""
        key_config, key_reset = jax.random.split(typed_key(key))
        return self.reset_to(key_reset, self.sample_config(key_config))

    def step(
        self,
        key: jax.Array,
        state: PyTree,
        actions: Mapping[str, jax.Array],
        reset_state: tuple[AgentDict, PyTree] | None = None,
        *,
        full_infos: bool = False,
    ) -> tuple[AgentDict, PyTree, AgentDict, AgentDict, dict]:
        """``step_env`` followed by a reset when ``dones["__all__"]``.

        Actions may be scalars or ``(1,)``-shaped arrays (what JaxMARL's batching produces).

        ``infos`` has the per-agent layout of :func:`agent_infos` (every leaf ``[num_agents]``),
        the layout JaxMARL's wrappers and baselines expect. ``full_infos=True`` (a static Python
        flag) returns the game's full event infos instead, exactly as ``step_env`` gives them;
        the metrics, the arena and the text harness read those.

        The reset sits behind :func:`dilemmax.envs.rare.rare_cond`, so an unbatched step pays for
        it only at the end of an episode, and ``jax.vmap(env.step)`` only on the steps where some
        env of the batch ends one (a plain ``lax.cond`` would become a select there and reset
        every env on every step); with ``gathered_resets``, only for the envs that ended one.
        ``reset_state`` (JaxMARL's option) supplies a precomputed
        ``(obs, state)`` to restart from instead.

        The returned rewards, dones and infos are those of the terminal transition; the returned
        observation and state are the first of the next episode.
        """
        self.check_action_keys(actions)
        key = typed_key(key)
        obs, state, rewards, dones, infos = self.step_env(
            subkey(key, 0), state, scalar_actions(actions)
        )
        # key_reset = subkey(key, 1) is derived inside the reset branch: the subkeys are those of
        # jax.random.split(key), but a batch pays for the second only on steps where a reset
        # runs (and for the first only if step_env reads its key).
        if reset_state is not None:
            obs, state = jax.tree.map(
                lambda r, s: jnp.where(dones["__all__"], r, s), reset_state, (obs, state)
            )
        elif self.obs_from_state:
            # Reset the state alone and build the observation once, after the choice: under
            # vmap that is one observation per env instead of two and a select, and XLA can
            # fuse it into whatever consumes it.
            state = rare_cond(
                dones["__all__"],
                lambda k, s: self.reset(subkey(k, 1))[1],
                lambda k, s: s,
                key,
                state,
                gathered=self.gathered_resets,
            )
            obs = self.get_obs(state)
        else:
            # A branch, not a select, even under vmap: see dilemmax.envs.rare.
            obs, state = rare_cond(
                dones["__all__"],
                lambda k, o, s: self.reset(subkey(k, 1)),
                lambda k, o, s: (o, s),
                key,
                obs,
                state,
                gathered=self.gathered_resets,
            )
        if not full_infos:
            infos = agent_infos(infos, self.num_agents)
        return obs, state, rewards, dones, infos

    def check_action_keys(self, actions: Mapping[str, Any]) -> None:
        """Raises ValueError unless ``actions`` is keyed by exactly the env's agents.

        A key no agent has (a typo, ``"__all__"``, an agent of a larger game) would otherwise be
        ignored, and a missing one would surface as a bare KeyError inside the game. The keys of
        a dict are static under ``jit`` and ``vmap``, so this runs once, when the step is traced,
        and costs the compiled step nothing.
        """
        if not isinstance(actions, Mapping):
            raise TypeError(
                f"{self.name}.step: actions must be a dict agent -> action, got "
                f"{type(actions).__name__}"
            )
        agents = set(self.agents)
        if actions.keys() == agents:
            return
        unknown = [str(k) for k in actions if k not in agents]
        missing = [a for a in self.agents if a not in actions]
        problems = []
        if unknown:
            problems.append(f"unknown agent(s) {', '.join(map(repr, unknown))}")
        if missing:
            problems.append(f"no action for {', '.join(map(repr, missing))}")
        raise ValueError(
            f"{self.name}.step: {'; '.join(problems)}; the actions dict must be keyed by exactly "
            f"the env's agents {self.agents}"
        )

    # ------------------------------------------------------------------ JaxMARL names
    def get_avail_actions(self, state: PyTree) -> AgentDict:
        """JaxMARL's name for :meth:`action_mask`: agent -> bool[num_actions]."""
        return self.action_mask(state)

    @property
    def observation_spaces(self) -> dict[str, Any]:
        """agent -> observation space, as JaxMARL's wrappers read it.

        When JaxMARL is imported (its wrappers check the space classes), these are JaxMARL's own
        ``Box`` / ``Discrete``; otherwise dilemmax's spaces (the same sets).
        """
        return {a: jaxmarl_space(self.observation_space(a)) for a in self.agents}

    @property
    def action_spaces(self) -> dict[str, Any]:
        """agent -> action space; JaxMARL's classes when JaxMARL is imported (see above)."""
        return {a: jaxmarl_space(self.action_space(a)) for a in self.agents}

    def global_state(self, state: PyTree) -> jax.Array:
        """float32[D]: the centralised critic's input (MAPPO). Default: all observations, flat."""
        obs = self.get_obs(state)
        return jnp.concatenate([obs[a].reshape(-1).astype(jnp.float32) for a in self.agents])

    def episode_metrics(self, rollout: Rollout) -> dict[str, jax.Array]:
        """Per-episode metrics computed from a rollout, each declared in ``metric_axes``.
        Default: per-agent return and length."""
        returns = jnp.stack(
            [jnp.sum(jnp.where(rollout.valid, rollout.rewards[a], 0.0)) for a in self.agents]
        )
        return {"return": returns, "length": jnp.sum(rollout.valid).astype(jnp.int32)}

    def config_grids(self) -> dict[str, Callable[[], PyTree]]:
        """name -> builder of a batched configuration grid a paper sweeps (every leaf with a
        leading axis C), for ``reset_to`` under ``jax.vmap`` and the trainer's
        ``train_grid`` / ``eval_grid``. Default: none."""
        return {}

    def sweep(self) -> list[SweepPart]:
        """The grid this game's paper sweeps, as the parts ``dilemmax play --grid`` plays (the
        env's own options; a part may need another number of agents). Default: none."""
        return []

    def scripted_policies(self) -> dict[str, Any]:
        """name -> jittable scripted policy (see :mod:`dilemmax.agents.policy`) for this env."""
        return {}

    def text_protocol(self, **options) -> Any:
        """The game's text renderer and reply parser (:class:`dilemmax.envs.text.TextProtocol`)."""
        raise NotImplementedError(f"{type(self).__name__} has no text protocol")

    def render(self, state: PyTree, mode: str = "ansi"):
        """``"ansi"`` -> str; ``"rgb_array"`` -> uint8[H, W, 3] where the env supports it."""
        if mode not in self.render_modes:
            raise ValueError(f"render mode {mode!r} is not one of {self.render_modes}")
        if mode == "ansi":
            return self.render_ansi(state)
        return self.render_rgb(state)

    def render_ansi(self, state: PyTree) -> str:
        return repr(state)

    def render_rgb(self, state: PyTree):
        raise NotImplementedError(f"{type(self).__name__} has no rgb_array rendering")

    @property
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"{self.name}(num_agents={self.num_agents})"
