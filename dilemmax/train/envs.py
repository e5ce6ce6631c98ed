"""The env a trainer sees: a registered env whose configurations are fixed or drawn from a grid.

:class:`ConfiguredEnv` changes only ``sample_config``: it draws from a batched configuration grid
(say the 228 consequence contexts) or from the env's own sampler, then overwrites chosen fields
(the rule, the query cost, ...). The override values may be traced arrays, so a sweep over them
runs as one ``jax.vmap`` of the whole training program.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from dilemmax.envs.base import MultiAgentEnv, PyTree
from dilemmax.envs.registry import make


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
    """The overrides as arrays of the fields' dtypes (what a runner state carries)."""
    out = {}
    for name, value in (overrides or {}).items():
        node = template
        for part in name.split("."):
            node = node[part] if isinstance(node, Mapping) else getattr(node, part)
        node = jnp.asarray(node)
        out[name] = jnp.broadcast_to(jnp.asarray(value).astype(node.dtype), node.shape)
    return out


class ConfiguredEnv(MultiAgentEnv):
    """``env`` with configurations drawn from ``grid`` (or its sampler) and ``overrides`` applied.

    Everything except ``sample_config`` is the wrapped env's; unknown attributes (grids,
    metrics helpers) are forwarded.
    """

    def __init__(self, env: MultiAgentEnv, overrides: Mapping[str, Any] | None = None, grid=None):
        super().__init__(env.num_agents, env.agents)
        self._env = env
        self.overrides = dict(overrides or {})
        self.grid = grid
        self.max_steps = env.max_steps
        self.render_modes = env.render_modes
        # Only sample_config changes, so the game's auto-reset shortcuts (see MultiAgentEnv)
        # still hold; this class's defaults (both False) would turn them off.
        self.obs_from_state = env.obs_from_state
        self.gathered_resets = env.gathered_resets

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
