"""Training configurations: one dataclass for IPPO and MAPPO, defaults per environment.

A config is plain data (JSON round-trips it into a run folder), built as
``make_config(env_id, algo, overrides)``: the dataclass defaults, then the game's own (declared
on its env class: ``training_defaults`` and ``evaluation_options``, :func:`game_defaults`), then
the user's ``key=value`` overrides (``--set`` on the command line).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from dilemmax.agents.networks import CONV_IMPLS, NetworkSpec
from dilemmax.agents.transforms import LEARNER_TRANSFORMS
from dilemmax.envs.option_spec import INT32_MAX, NOT_ALLOWED, shown
from dilemmax.envs.options import (
    OptionError,
    OptionSpec,
    check_env_options,
    env_option_specs,
    merge,
    parse_value,
    spec_from_annotation,
)
from dilemmax.envs.registry import (
    check_version,
    current_option_names,
    env_spec,
    env_version,
    renamed_option,
)
from dilemmax.envs.seat_spec import parse_seat
from dilemmax.train.envs import check_override_ranges


class _TransformSpec(OptionSpec):
    """learner_transform: None or a name in :data:`LEARNER_TRANSFORMS` (read at check time, so
    registered transforms count)."""

    def describe(self) -> str:
        return "None or one of " + ", ".join(repr(n) for n in sorted(LEARNER_TRANSFORMS))

    def _check_kind(self, value: Any) -> Any:
        return value if isinstance(value, str) and value in LEARNER_TRANSFORMS else NOT_ALLOWED


_COUNT = OptionSpec("int", low=1, high=INT32_MAX)
_COEF = OptionSpec("float", low=0.0, high=1e6)


def ranged(spec: OptionSpec, default: Any = dataclasses.MISSING, **kwargs) -> Any:
    """A TrainConfig field whose range is ``spec`` (in its metadata: ``FIELD_RANGES``)."""
    return field(default=default, metadata={"range": spec}, **kwargs)


@dataclass
class TrainConfig:
    """Everything a training run depends on.

    Environment and seats:
        env: registered env id. env_kwargs: its static constructor options for training;
        eval_env_kwargs: options of the evaluation env (say ``{"split": "held_out"}``), merged
        over env_kwargs.
        env_config: overrides of fields of the env's configuration pytree, ``{field: value}``
        (dotted names reach nested fields), applied to every sampled configuration; this fixes
        for instance the consequence rule or the moral-hazard query cost.
        train_grid / eval_grid: name of an env method returning a batched configuration grid
        (leading axis C) to sample training configurations from, or to evaluate on; None samples
        with ``env.sample_config``.
        learners: indices of the seats that learn (None: all); the other seats play
        ``partner_policy``, a seat spec that plays inside JAX (docs/seats.md): a scripted name
        ("random", "first_legal" or one of the game's), ``scripted:<name>``,
        ``trained:<run folder>[,seed=<k>][,greedy]`` or ``zoo:<game>/<population>``.
        learner_transform: "module:function" of a policy transformer (policy -> policy) that
        scripts some of a learner's decisions, e.g. the moral-hazard
        ``dilemmax.envs.moral_hazard.policies:with_scripted_followup`` (only the work move is
        learned). Where the transformed policy does not call the learner, the scripted action is
        played and the step is left out of the policy loss.
        reward: "individual" (each learner its own reward) or "team" (the mean over all agents);
        reward_scale multiplies the rewards the learners train on (logged returns stay raw).

    PPO (PureJaxRL / JaxMARL conventions): num_envs parallel envs, num_steps per rollout,
    update_epochs x num_minibatches (minibatches split the envs), clipped surrogate, GAE.

    Network: see :class:`~dilemmax.agents.networks.NetworkSpec`; shared_params shares one
    parameter set across learners (agent-id input), else one per learner. recurrent: an RL^2
    actor (and, for IPPO, critic) with a GRU memory of gru_hidden units that persists across
    trials and resets at episode starts (:class:`~dilemmax.agents.networks.RecurrentNet`).

    Warm start: init_from names a run folder (its newest checkpoint) or a checkpoint file whose
    parameters a fresh run starts from (a curriculum's next stage), with a fresh optimiser; the
    networks must have the same shapes. Resuming ignores it (the run's own checkpoint wins).

    Run: num_seeds seeds train in one vmapped program; shard splits the env batch over every
    device of the run, all processes' ("auto": when there is more than one; a run on several
    processes always shards). checkpointer: "auto" (msgpack files on one process, orbax folders
    on several), "msgpack" or "orbax" (see :mod:`dilemmax.train.run`). log_every updates make
    one compiled chunk (the unit of logging, progress and checkpointing); checkpoint_every and
    eval_every count chunks. wandb is off by default (wandb_mode "offline" works without a network).
    stall_timeout: seconds a chunk may wait with the process idle (no CPU time used) before the
    run ends with a one-line error and exit status 3 (:mod:`dilemmax.train.watchdog`; a busy
    chunk is never ended); 0 never ends it.
    """

    env: str = "moral_hazard"
    algo: str = ranged(OptionSpec("str", choices=("ippo", "mappo")), "ippo")
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_config: dict[str, Any] = field(default_factory=dict)
    train_grid: str | None = None
    eval_grid: str | None = None
    learners: list[int] | None = ranged(
        OptionSpec("list", optional=True, min_len=1, item=OptionSpec("int", low=0)), None
    )
    partner_policy: str = "random"
    learner_transform: str | None = ranged(_TransformSpec("str", optional=True), None)
    reward: str = ranged(OptionSpec("str", choices=("individual", "team")), "individual")
    reward_scale: float = ranged(OptionSpec("float", low=-1e6, high=1e6), 1.0)

    total_timesteps: int = ranged(OptionSpec("int", low=1, high=10**13), 200_000)
    num_envs: int = ranged(OptionSpec("int", low=1, high=2**20), 64)
    num_steps: int = ranged(OptionSpec("int", low=1, high=100_000), 16)
    update_epochs: int = ranged(OptionSpec("int", low=1, high=10_000), 4)
    num_minibatches: int = ranged(OptionSpec("int", low=1, high=2**20), 4)
    lr: float = ranged(OptionSpec("float", low=0.0, high=1.0, low_open=True), 2.5e-3)
    anneal_lr: bool = True
    gamma: float = ranged(OptionSpec("float", low=0.0, high=1.0), 0.99)
    gae_lambda: float = ranged(OptionSpec("float", low=0.0, high=1.0), 0.95)
    clip_eps: float = ranged(OptionSpec("float", low=0.0, high=100.0, low_open=True), 0.2)
    ent_coef: float = ranged(_COEF, 0.01)
    vf_coef: float = ranged(_COEF, 0.5)
    max_grad_norm: float = ranged(OptionSpec("float", low=0.0, high=1e6, low_open=True), 0.5)
    normalize_advantages: bool = True

    shared_params: bool = True
    hidden: int = ranged(OptionSpec("int", low=1, high=65_536), 64)
    num_layers: int = ranged(OptionSpec("int", low=0, high=64), 2)
    activation: str = ranged(OptionSpec("str", choices=("tanh", "relu")), "tanh")
    embed_dim: int = ranged(OptionSpec("int", low=1, high=4096), 8)
    conv_features: list[int] = ranged(
        OptionSpec("list", max_len=16, item=OptionSpec("int", low=1, high=4096)),
        default_factory=lambda: [16, 32],
    )
    agent_id: bool = True
    conv_impl: str = ranged(OptionSpec("str", choices=CONV_IMPLS), "auto")
    recurrent: bool = False
    gru_hidden: int = ranged(OptionSpec("int", low=1, high=65_536), 64)
    init_from: str | None = ranged(OptionSpec("str", optional=True), None)

    seed: int = ranged(OptionSpec("int", low=0, high=INT32_MAX), 0)
    num_seeds: int = ranged(OptionSpec("int", low=1, high=65_536), 1)
    shard: str = ranged(OptionSpec("choice", choices=("auto", "on", "off", True, False)), "auto")
    checkpointer: str = ranged(OptionSpec("str", choices=("auto", "msgpack", "orbax")), "auto")
    log_every: int = ranged(_COUNT, 10)
    checkpoint_every: int = ranged(_COUNT, 5)
    keep_checkpoints: int = ranged(_COUNT, 3)
    eval_every: int = ranged(OptionSpec("int", low=0, high=INT32_MAX), 5)
    eval_episodes: int = ranged(_COUNT, 16)
    progress: bool = True
    stall_timeout: float = ranged(OptionSpec("float", low=0.0, high=1e7), 600.0)
    wandb: bool = False
    wandb_project: str = "dilemmax"
    wandb_mode: str = ranged(OptionSpec("str", choices=("online", "offline", "disabled")), "online")

    # ------------------------------------------------------------------ derived
    @property
    def num_updates(self) -> int:
        """Updates, rounded up to whole chunks of ``log_every``."""
        per_update = self.num_envs * self.num_steps
        updates = max(1, -(-self.total_timesteps // per_update))
        return -(-updates // self.log_every) * self.log_every

    @property
    def num_chunks(self) -> int:
        return self.num_updates // self.log_every

    def network_spec(self) -> NetworkSpec:
        return NetworkSpec(
            hidden=self.hidden,
            num_layers=self.num_layers,
            activation=self.activation,
            embed_dim=self.embed_dim,
            conv_features=tuple(self.conv_features),
            agent_id=self.agent_id,
            conv_impl=self.conv_impl,
        )

    def validate(self) -> None:
        """Checks every field's type and range (see :func:`field_spec`) and the constraints
        between fields, before anything compiles. Raises :class:`OptionError` (a ValueError)
        naming the field, the value and what is allowed; ints given for float fields become
        floats."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            setattr(self, f.name, field_spec(f.name).check(f.name, value, "TrainConfig"))
        if self.num_envs % self.num_minibatches:
            raise OptionError(
                f"TrainConfig: num_envs ({self.num_envs}) must be a multiple of num_minibatches "
                f"({self.num_minibatches}): minibatches split the envs"
            )
        for name in ("train_grid", "eval_grid"):
            grid = getattr(self, name)
            if grid is not None and not _GRID_NAME.fullmatch(grid):
                raise OptionError(
                    f"TrainConfig: option {name}={grid!r} is not allowed: expected the name of a "
                    "configuration grid (lower-case letters, digits and underscores)"
                )
        if self.learners is not None and len(set(self.learners)) != len(self.learners):
            raise OptionError(f"TrainConfig: learners {self.learners} repeat a seat")
        parse_seat(self.partner_policy)  # its grammar now; the policy is loaded with the env
        if self.recurrent and self.learner_transform:
            raise OptionError(
                "TrainConfig: recurrent=True does not combine with learner_transform: a scripted "
                "step would leave the memory without the learner's own action"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The config as a run folder's config.json: its fields and ``env_version``, the
        version of the game it trains on (docs/versions.md)."""
        values = self.to_dict()
        with contextlib.suppress(ValueError):  # an unknown env: validate() names it
            values[ENV_VERSION] = env_version(self.env, self.env_kwargs)
        return json.dumps(values, indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "this config") -> TrainConfig:
        """A config from plain data (say a config.json); unknown keys are refused. Call
        :meth:`validate` before using values that came from outside. A recorded
        ``env_version`` other than the game's current one is refused (an EnvVersionError
        naming ``where`` and both versions)."""
        if not isinstance(values, dict):
            raise OptionError(f"a training config must be a JSON object, got {shown(values)}")
        if ENV_VERSION in values:
            values = dict(values)
            _check_recorded_version(values, values.pop(ENV_VERSION), where)
        values = _current_env_option_names(values)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise OptionError(
                f"unknown config key(s): {', '.join(map(str, unknown))}; "
                f"keys: {', '.join(sorted(names))}"
            )
        return cls(**values)


def _current_env_option_names(values: dict[str, Any]) -> dict[str, Any]:
    """A config.json saved before a game renamed an option reads with the option's name now."""
    env = values.get("env")
    if not isinstance(env, str):
        return values
    values = dict(values)
    for name in ("env_kwargs", "eval_env_kwargs"):
        if isinstance(values.get(name), dict):
            values[name] = current_option_names(env, values[name])
    return values


# The key of config.json that records the game's version (not a field: nothing sets it).
ENV_VERSION = "env_version"


def _check_recorded_version(values: dict[str, Any], recorded: Any, where: str) -> None:
    env, kwargs = values.get("env"), values.get("env_kwargs")
    if isinstance(recorded, bool) or not isinstance(recorded, int) or recorded < 0:
        raise OptionError(f"{where}: env_version is {shown(recorded)}, not an integer >= 0")
    if isinstance(env, str) and isinstance(kwargs, dict | None):
        try:
            env_spec(env)
        except ValueError:  # an unknown env: validate() names it
            return
        check_version(env, recorded, where, kwargs)


# ----------------------------------------------------------------------------- field ranges
_GRID_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


# Each field's declared range, read from its metadata (a field without one, say one added later,
# is still checked against its annotated type).
FIELD_RANGES: dict[str, OptionSpec] = {
    f.name: f.metadata["range"] for f in dataclasses.fields(TrainConfig) if "range" in f.metadata
}


@functools.cache
def _annotations() -> dict[str, str]:
    return {f.name: f.type for f in dataclasses.fields(TrainConfig)}


def field_spec(name: str) -> OptionSpec:
    """What TrainConfig field ``name`` accepts: its declared range, else its annotated type."""
    return merge(FIELD_RANGES.get(name), spec_from_annotation(_annotations().get(name, "Any")))


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Merges ``overrides`` into ``values``; ``a.b=v`` sets key ``b`` of the dict at ``a``."""
    values = json.loads(json.dumps(values))  # deep copy of plain data
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if rest:
            if head not in values or not isinstance(values[head], dict):
                raise ValueError(f"cannot set {key!r}: {head!r} is not a dict option")
            values[head][rest] = value
        else:
            values[head] = value
    return values


_DICT_OPTIONS = ("env_kwargs", "eval_env_kwargs", "env_config")


def parse_sets(pairs: list[str] | None, env: str | None = None) -> dict[str, Any]:
    """``["lr=1e-3", "env_kwargs.sorted_agents=false"]`` -> ``{"lr": 0.001, ...}``, each value
    typed by what it sets: a TrainConfig field by its spec, ``env_kwargs.X`` /
    ``eval_env_kwargs.X`` by the option X of ``env`` (when given), ``env_config.X`` untyped.

    Raises :class:`OptionError` (naming the key, the value and what is allowed) for a malformed
    pair, an unknown field or a value of the wrong type or range; never anything else.
    """
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, text = str(pair).partition("=")
        key = key.strip()
        if not sep or not key:
            raise OptionError(f"--set expects key=value, got {shown(pair)}")
        out[key] = parse_value(text, _spec_for_key(key, env), key)
    return out


def _spec_for_key(key: str, env: str | None) -> OptionSpec | None:
    head, _, rest = key.partition(".")
    names = list(_annotations())
    if head not in names:
        close = difflib.get_close_matches(head, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise OptionError(f"unknown config key {head!r}{hint}; keys: {', '.join(sorted(names))}")
    if not rest:
        return field_spec(head)
    if head not in _DICT_OPTIONS:
        raise OptionError(f"cannot set {key!r}: {head!r} is not a dict option")
    if head == "env_config" or env is None:
        return None
    specs = env_option_specs(env)
    rest = renamed_option(env, rest)  # an old name: from_dict renames it, with one warning
    if rest not in specs:
        raise OptionError(f"{env}: unknown option {rest!r}; options: {', '.join(sorted(specs))}")
    return specs[rest]


def make_config(
    env: str, algo: str = "ippo", overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """Dataclass defaults, then the game's (its ``evaluation_options`` as ``eval_env_kwargs``,
    its ``training_defaults``), then ``overrides``."""
    values = TrainConfig(env=env, algo=algo).to_dict()
    values = apply_overrides(values, game_defaults(env))
    values = apply_overrides(values, overrides or {})
    config = TrainConfig.from_dict(values)
    config.validate()
    check_env_kwargs(config)
    return config


def game_defaults(env: str) -> dict[str, Any]:
    """What the game declares for training (:attr:`MultiAgentEnv.training_defaults`, a grid
    method named by its name, and its ``evaluation_options`` as ``eval_env_kwargs``); nothing
    for an env id that is not registered."""
    try:
        env_cls = env_spec(env).load()
    except ValueError:
        return {}
    defaults: dict[str, Any] = {}
    if env_cls.evaluation_options:
        defaults["eval_env_kwargs"] = dict(env_cls.evaluation_options)
    for name, value in env_cls.training_defaults.items():
        defaults[name] = value.__name__ if callable(value) else value
    return defaults


def check_env_kwargs(config: TrainConfig) -> None:
    """Checks env_kwargs and eval_env_kwargs against the env's options, and env_config's values
    against the ranges of the options they share a name with (without building the env)."""
    try:
        env_cls = env_spec(config.env).load()
    except ValueError:
        return  # not a registered env (tests pass an instance to the trainer): nothing to check
    specs = env_option_specs(config.env)
    for name in ("env_kwargs", "eval_env_kwargs"):
        unknown = sorted(set(getattr(config, name)) - set(specs))
        if unknown:
            raise OptionError(
                f"{name}: {config.env} has no option(s) {', '.join(map(str, unknown))}; "
                f"options: {', '.join(sorted(specs))}"
            )
    check_env_options(env_cls, config.env_kwargs)
    check_env_options(env_cls, {**config.env_kwargs, **config.eval_env_kwargs})
    # env_config.cost=nan meets the same range as env_kwargs.cost=nan (the fields' shapes and
    # dtypes need the built env: TrainingRun checks them).
    check_override_ranges(config.env, env_cls, config.env_config)
