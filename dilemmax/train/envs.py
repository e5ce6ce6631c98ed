"""The env a trainer sees: a registered env whose configurations are fixed or drawn from a grid.

:class:`ConfiguredEnv` changes only ``sample_config``: it draws from a batched configuration grid
(say the 228 consequence contexts) or from the env's own sampler, then overwrites chosen fields
(the rule, the query cost, ...). The override values may be traced arrays, so a sweep over them
runs as one ``jax.vmap`` of the whole training program.

The override values are checked before anything compiles (:func:`check_env_config`,
:func:`check_override_ranges`): each name must be a field of the env's configuration, each value a
number that fits the field's dtype and shape (finite for a float field, integral for an int one),
and a field that shares its name with one of the env's options (the moral-hazard ``cost`` and
``w_team``, the grid games' ``p_spawn``; the consequence ``rule``, an item of its ``rules``) must
lie in that option's declared range, so ``env_config.cost=nan`` is refused exactly as
``env_kwargs.cost=nan`` is. Traced values (a ``jax.vmap`` over a sweep) cannot be read: check a
sweep's arrays with these functions before vmapping over them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.base import MultiAgentEnv, PyTree
from dilemmax.envs.memory import (
    MemoryNeeded,
    check_episodes_fit,
    human_size,
    machine_memory,
    nbytes,
)
from dilemmax.envs.option_spec import shown
from dilemmax.envs.options import OptionError, OptionSpec, constructor_specs
from dilemmax.envs.registry import make
from dilemmax.envs.rollout import num_configs_of

# Kinds of option whose range applies to a configuration field of the same name (a "str"
# option such as the moral-hazard mapping is stored as an index: its names do not apply).
_NUMERIC_KINDS = ("int", "float", "bool")
# A sweep array checked value by value: at most this many distinct values are read.
_MAX_DISTINCT = 100_000


def _replace_field(config: PyTree, path: list[str], value) -> PyTree:
    """``config`` with the field at ``path`` set to ``value`` (cast to that field's dtype/shape)."""
    head, rest = path[0], path[1:]
    if isinstance(config, Mapping):
        if head not in config:
            raise KeyError(f"configuration has no field {head!r}; fields: {sorted(config)}")
        old = config[head]
    else:
        if not hasattr(config, head):
            names = sorted(getattr(config, "__dataclass_fields__", {}))
            raise KeyError(f"configuration has no field {head!r}; fields: {names}")
        old = getattr(config, head)
    if rest:
        new = _replace_field(old, rest, value)
    else:
        old_arr = jnp.asarray(old)
        new = jnp.broadcast_to(jnp.asarray(value).astype(old_arr.dtype), old_arr.shape)
    if isinstance(config, Mapping):
        return {**config, head: new}
    return config.replace(**{head: new})


def apply_config_overrides(config: PyTree, overrides: Mapping[str, Any] | None) -> PyTree:
    """Sets configuration fields by (dotted) name; values may be Python numbers or traced arrays."""
    for name, value in (overrides or {}).items():
        config = _replace_field(config, name.split("."), value)
    return config


def overrides_as_arrays(overrides: Mapping[str, Any] | None, template: PyTree) -> dict:
    """The overrides as arrays of the fields' dtypes (what a runner state carries); a concrete
    value that does not fit its field (NaN, 2.5 for an int, a wrong shape) is an OptionError."""
    out = {}
    for name, value in (overrides or {}).items():
        node = _field(template, str(name), type(template).__name__)  # an array or its shape
        check_field_value(str(name), value, node)
        out[name] = jnp.broadcast_to(jnp.asarray(value).astype(node.dtype), node.shape)
    return out


# ----------------------------------------------------------------------------- checks
def _field(template: PyTree, name: str, owner: str):
    """The leaf (or subtree) of ``template`` at dotted ``name``; OptionError listing the fields."""
    node = template
    for part in name.split("."):
        fields = node if isinstance(node, Mapping) else getattr(node, "__dataclass_fields__", {})
        if part not in fields:
            raise OptionError(
                f"env_config: {owner} configurations have no field {name!r}; "
                f"fields: {', '.join(sorted(map(str, fields)))}"
            )
        node = node[part] if isinstance(node, Mapping) else getattr(node, part)
    return node


def _traced(value: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(value))


def _numbers(name: str, value: Any, expected: str) -> np.ndarray:
    """``value`` as a numeric numpy array, else OptionError naming the override."""
    try:
        array = np.asarray(value) if not isinstance(value, str | bytes) else None
    except (ValueError, TypeError):  # a ragged list, an object numpy cannot hold
        array = None
    if array is None or array.dtype.kind not in "biuf":
        given = f"env_config.{name}={shown(value)}"
        raise OptionError(f"option {given} is not allowed: expected {expected}")
    return array


def check_field_value(name: str, value: Any, node) -> None:
    """A concrete override fits its field ``node`` (a leaf of the configuration's shape and
    dtype): numeric, broadcastable to the field's shape, finite for a float field, integral and
    within the dtype for an int one, 0/1 for a bool one. Traced values pass unread."""
    if not hasattr(node, "dtype"):
        raise OptionError(f"env_config: {name!r} is a group of fields; set one of its fields")
    if _traced(value):
        return
    dtype, shape = np.dtype(node.dtype), tuple(node.shape)
    what = f"a number for the field ({dtype}{shape})"
    array = _numbers(name, value, what)
    try:
        np.broadcast_to(array, shape)
    except ValueError:
        raise OptionError(
            f"option env_config.{name}={shown(value)} does not fit the field ({dtype}{shape})"
        ) from None
    bad = _unfit(array, dtype)
    if bad is not None:
        raise OptionError(
            f"option env_config.{name}={shown(bad)} is not allowed: expected {_fit_words(dtype)}"
        )


def _unfit(array: np.ndarray, dtype: np.dtype):
    """The first entry of ``array`` that a field of ``dtype`` cannot hold as it is, or None."""
    values = array.astype(np.float64, copy=False).ravel()
    if dtype.kind == "f":
        ok = np.isfinite(values) & (np.abs(values) <= np.finfo(dtype).max)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        ok = np.isfinite(values) & (values == np.round(values))
        ok &= (values >= info.min) & (values <= info.max)
    elif dtype.kind == "b":
        ok = (values == 0) | (values == 1)
    else:
        return None
    if ok.all():
        return None
    return array.ravel()[int(np.argmin(ok))].item()


def _fit_words(dtype: np.dtype) -> str:
    if dtype.kind == "f":
        return f"a finite number ({dtype})"
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return f"an integer in {info.min}..{info.max} ({dtype})"
    return "true or false (0 or 1)"


def override_spec(env_cls: type, name: str) -> OptionSpec | None:
    """The declared option range that applies to configuration field ``name``: the option of
    the same name (``cost``), or the item of a list option named as its plural (``rule`` in
    ``rules``); None where the env declares neither."""
    specs = constructor_specs(env_cls)
    leaf = name.rsplit(".", 1)[-1]
    spec = specs.get(leaf)
    if spec is not None and spec.kind in _NUMERIC_KINDS:
        return spec
    plural = specs.get(leaf + "s")
    item = plural.item if plural is not None and plural.kind == "list" else None
    return item if item is not None and item.kind in (*_NUMERIC_KINDS, "choice") else None


def check_override_ranges(env_id: str, env_cls: type, overrides: Mapping[str, Any]) -> None:
    """Every concrete override value (every entry of a sweep array) within the range of the
    env option it shares a name with (:func:`override_spec`); OptionError naming the env, the
    override and the range. Needs only the env's class: nothing is built or traced."""
    for name, value in (overrides or {}).items():
        spec = override_spec(env_cls, str(name))
        if spec is None or _traced(value):
            continue
        array = _numbers(str(name), value, spec.describe())
        distinct = np.unique(array.ravel()[: _MAX_DISTINCT * 10])[:_MAX_DISTINCT]
        if array.dtype.kind == "f":  # np.unique keeps one NaN; spec.check refuses it
            distinct = np.concatenate([distinct, array.ravel()[np.isnan(array.ravel())][:1]])
        for item in distinct.tolist():
            item = bool(item) if spec.kind == "bool" and item in (0, 1) else item
            spec.check(f"env_config.{name}", item, env_id)


def check_env_config(env: MultiAgentEnv, overrides: Mapping[str, Any] | None) -> None:
    """Checks ``env_config`` overrides against ``env`` before anything compiles: each dotted
    name a field of its configuration pytree (read by ``jax.eval_shape``, nothing runs), each
    value fitting the field (:func:`check_field_value`) and the range of the env option of the
    same name (:func:`check_override_ranges`). Raises OptionError naming the field."""
    if not overrides:
        return
    template = jax.eval_shape(env.sample_config, jax.random.PRNGKey(0))
    owner = type(env).__name__
    fields = {name: _field(template, str(name), owner) for name in overrides}
    check_override_ranges(owner, type(env), overrides)  # the declared range says most
    for name, value in overrides.items():
        check_field_value(str(name), value, fields[name])


class ConfiguredEnv(MultiAgentEnv):
    """``env`` with configurations drawn from ``grid`` (or its sampler) and ``overrides`` applied.

    Everything except ``sample_config`` is the wrapped env's; unknown attributes (grids,
    metrics helpers) are forwarded.
    """

    def __init__(self, env: MultiAgentEnv, overrides: Mapping[str, Any] | None = None, grid=None):
        super().__init__(env.num_agents, env.agents)
        self._env = env
        self.overrides = dict(overrides or {})
        check_override_ranges(type(env).__name__, type(env), self.overrides)
        self.grid = grid
        self.max_steps = env.max_steps
        self.render_modes = env.render_modes
        # Only sample_config changes, so the game's auto-reset shortcuts (see MultiAgentEnv)
        # still hold; this class's defaults (both False) would turn them off.
        self.obs_from_state = env.obs_from_state
        self.gathered_resets = env.gathered_resets
        self.metric_axes = env.metric_axes  # episode_metrics is the wrapped env's

    def __getattr__(self, name):
        # Only reached for attributes this class lacks.
        if name == "_env":
            raise AttributeError(name)
        return getattr(self._env, name)

    @property
    def inner(self) -> MultiAgentEnv:
        return self._env

    @property
    def unwrapped(self) -> MultiAgentEnv:
        # Wrappers (VecEnv, LogWrapper) reset through ``unwrapped``: it must be this env, so
        # that fresh episodes keep the grid and the overrides.
        return self

    def sample_config(self, key: jax.Array) -> PyTree:
        if self.grid is None:
            config = self._env.sample_config(key)
        else:
            size = jax.tree.leaves(self.grid)[0].shape[0]
            index = jax.random.randint(key, (), 0, size)
            config = jax.tree.map(lambda x: x[index], self.grid)
        return apply_config_overrides(config, self.overrides)

    def reset_to(self, key, config):
        return self._env.reset_to(key, config)

    def step_env(self, key, state, actions):
        return self._env.step_env(key, state, actions)

    def get_obs(self, state):
        return self._env.get_obs(state)

    def action_mask(self, state):
        return self._env.action_mask(state)

    def observation_space(self, agent):
        return self._env.observation_space(agent)

    def action_space(self, agent):
        return self._env.action_space(agent)

    def global_state(self, state):
        return self._env.global_state(state)

    def episode_metrics(self, rollout):
        return self._env.episode_metrics(rollout)

    def scripted_policies(self):
        return self._env.scripted_policies()

    def config_grids(self):
        return self._env.config_grids()

    def render_ansi(self, state):
        return self._env.render_ansi(state)


def make_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> MultiAgentEnv:
    return make(env_id, **dict(env_kwargs or {}))


def config_grid(env: MultiAgentEnv, name: str | None) -> PyTree | None:
    """The batched configuration grid called ``name`` (leading axis C), or None.

    ``name`` is one of the grids the env declares (``env.config_grids()``: the consequence
    ``context_grid``, the moral-hazard ``condition_grid``, ...).
    """
    if not name:
        return None
    grids = env.config_grids()
    if name not in grids:
        declared = ", ".join(sorted(grids)) or "none"
        raise ValueError(
            f"{type(env).__name__} has no configuration grid {name!r}; its grids: {declared}"
        )
    return grids[name]()


# ----------------------------------------------------------------------------- memory
# The generic helpers (machine memory, sizes) live in dilemmax.envs.memory, which every command
# that batches episodes or envs uses.
def rollout_bytes(config, trainer, state) -> int:
    """Bytes of one rollout as the trainer stacks it (``num_steps`` Transitions, and the
    advantages and targets computed over it), from the shapes of a runner state ``state``
    (leaves [seeds, E, ...], say from ``jax.eval_shape``).

    Per step and learner: its observation, its action mask (bool[N]), action, log-prob, value,
    reward, acted, advantage and target (4 bytes each), the start flag, and the recurrent
    inputs (float32[N + 2]); per step and env: the done flag, every agent's episode return and,
    for MAPPO, the global state."""
    learners = [trainer.agents[i] for i in trainer.learners]
    lanes = np.prod(state.obs[learners[0]].shape[:2], dtype=np.float64)  # seeds x envs
    n = trainer.num_actions
    per_lane = n + 7 * 4 + 1 + (4 * (n + 2) if trainer.recurrent else 0)
    per_step = sum(nbytes(state.obs[a]) for a in learners) + lanes * len(learners) * per_lane
    per_step += lanes * (1 + 4 * trainer.num_agents)
    # critic_input maps over the envs itself; the outer map is the seeds'.
    critic = jax.eval_shape(
        jax.vmap(lambda s: trainer.nets.critic_input(s, None)), state.env_state.env_state
    )
    per_step += sum(nbytes(x) for x in jax.tree.leaves(critic))
    return int(per_step * config.num_steps)


def check_fits(config, trainer, seed_keys, mesh=None) -> None:
    """Refuses (:class:`MemoryNeeded`, with the estimate) a run whose rollout buffer and env
    batch exceed the machine's memory, before anything compiles: the runner state's shapes come
    from ``jax.eval_shape`` of the seeds' init (traced, not run), the rollout's from them."""
    state = jax.eval_shape(jax.vmap(trainer.init), seed_keys)
    batch = sum(nbytes(x) for x in jax.tree.leaves(state))
    buffer = rollout_bytes(config, trainer, state)
    available, what = machine_memory(mesh)
    if available and buffer + batch > available:
        raise MemoryNeeded(
            f"the rollout buffer would need {human_size(buffer)} (num_seeds={config.num_seeds} x "
            f"num_envs={config.num_envs} x num_steps={config.num_steps} x "
            f"{human_size(buffer / config.num_seeds / config.num_envs / config.num_steps)} per env "
            f"step) and the runner state {human_size(batch)}; this machine has {what}: lower "
            "num_envs, num_steps or num_seeds"
        )


def check_evaluation_fits(config, trainer) -> None:
    """Refuses (:class:`MemoryNeeded`, with the estimate) an evaluation this machine cannot
    hold, before it compiles: every seed's ``eval_episodes`` per evaluation configuration are
    played in one batched program."""
    env = trainer.eval_env()
    grid = config_grid(env.inner, config.eval_grid)
    episodes = config.num_seeds * config.eval_episodes * (num_configs_of(grid) or 1)
    check_episodes_fit(env, episodes, "the evaluation", "--episodes (eval_episodes)")
