"""Training configurations: one dataclass for IPPO and MAPPO, each field declared once.

A config is plain data (JSON round-trips it into a run folder), built for a game by
:func:`dilemmax.train.configure.make_config`. Each field is declared once (:func:`setting`), and
its meaning and range are read back here (:func:`field_doc`, :func:`field_spec`,
:func:`describe_fields`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from dilemmax.agents.networks import CONV_IMPLS, NetworkSpec
from dilemmax.agents.transforms import LEARNER_TRANSFORMS
from dilemmax.envs.option_declaration import merge, setting, spec_from_annotation
from dilemmax.envs.option_spec import INT32_MAX, NOT_ALLOWED, shown
from dilemmax.envs.options import OptionError, OptionSpec
from dilemmax.envs.registry import (
    check_version,
    current_option_names,
    env_spec,
    env_version,
)
from dilemmax.envs.seat_spec import SeatSpecError, check_plays_in_jax


class _TransformSpec(OptionSpec):
    """learner_transform: None or a name in :data:`LEARNER_TRANSFORMS` (read at check time, so
    registered transforms count)."""

    def describe(self) -> str:
        return "None or one of " + ", ".join(repr(n) for n in sorted(LEARNER_TRANSFORMS))

    def _check_kind(self, value: Any) -> Any:
        return value if isinstance(value, str) and value in LEARNER_TRANSFORMS else NOT_ALLOWED


_COUNT = OptionSpec("int", low=1, high=INT32_MAX)
_COEF = OptionSpec("float", low=0.0, high=1e6)


@dataclass
class TrainConfig:
    """Everything a training run depends on: the env and its seats, PPO's hyperparameters, the
    network, a warm start, and how the run is split, checkpointed, evaluated and logged.

    Each field is declared once, with its default, its range and its meaning (its metadata:
    :func:`field_doc`, :func:`field_spec`); ``dilemmax train --help`` lists them and
    docs/training.md tabulates them. PPO follows PureJaxRL's and JaxMARL's conventions. A
    game's own defaults are declared on its env class (``training_defaults``,
    :func:`~dilemmax.train.configure.game_defaults`) and come between these and the user's.
    """

    # Environment and seats.
    env: str = setting("moral_hazard", "the registered env id to train on")
    algo: str = setting(
        "ippo",
        "ippo (a critic per learner, on its own observation) or mappo (a centralised critic "
        "on the env's global state)",
        OptionSpec("str", choices=("ippo", "mappo")),
    )
    env_kwargs: dict[str, Any] = setting(
        help="the env's constructor options for training (`env_kwargs.<option>=value`)",
        default_factory=dict,
    )
    eval_env_kwargs: dict[str, Any] = setting(
        help="options of the evaluation env, over env_kwargs (say `split=held_out`)",
        default_factory=dict,
    )
    env_config: dict[str, Any] = setting(
        help="overrides of fields of the env's configuration pytree, `{field: value}` (dotted "
        "names reach nested fields), applied to every sampled configuration: this fixes, say, "
        "the consequence rule or the moral-hazard query cost",
        default_factory=dict,
    )
    train_grid: str | None = setting(
        None,
        "the name of an env method returning a batched configuration grid to sample training "
        "configurations from (lower-case letters, digits, underscores); None: "
        "`env.sample_config`",
    )
    eval_grid: str | None = setting(
        None,
        "the name of an env method returning the configuration grid to evaluate on; None: "
        "sampled configurations",
    )
    learners: list[int] | None = setting(
        None,
        "the indices of the seats that learn, each once (None: every seat); the others play "
        "partner_policy",
        OptionSpec("list", optional=True, min_len=1, item=OptionSpec("int", low=0)),
    )
    partner_policy: str = setting(
        "random",
        "the seat spec of the seats that do not learn, one that plays inside JAX (docs/seats.md):"
        " a scripted name, `scripted:<name>`, `trained:<run folder>[,seed=<k>][,greedy]` or "
        "`zoo:<game>/<population>`",
    )
    learner_transform: str | None = setting(
        None,
        "`module:function` of a registered policy transformer that scripts some of a learner's "
        "decisions (say `dilemmax.envs.moral_hazard.policies:with_scripted_followup`: only the "
        "work move is learned); a scripted step is played and left out of the policy loss",
        _TransformSpec("str", optional=True),
    )
    reward: str = setting(
        "individual",
        "what a learner trains on: individual (its own reward) or team (the mean over all agents)",
        OptionSpec("str", choices=("individual", "team")),
    )
    reward_scale: float = setting(
        1.0,
        "multiplies the rewards the learners train on (logged returns stay raw)",
        OptionSpec("float", low=-1e6, high=1e6),
    )

    # PPO.
    total_timesteps: int = setting(
        200_000,
        "env steps to train for, per seed (rounded up to whole chunks of log_every updates)",
        OptionSpec("int", low=1, high=10**13),
    )
    num_envs: int = setting(
        64, "envs stepped in parallel, per seed", OptionSpec("int", low=1, high=2**20)
    )
    num_steps: int = setting(
        16, "steps of each env per rollout (one update)", OptionSpec("int", low=1, high=100_000)
    )
    update_epochs: int = setting(
        4, "PPO epochs over each rollout", OptionSpec("int", low=1, high=10_000)
    )
    num_minibatches: int = setting(
        4,
        "minibatches per epoch; they split the envs, so num_envs must be a multiple",
        OptionSpec("int", low=1, high=2**20),
    )
    lr: float = setting(
        2.5e-3,
        "Adam's learning rate",
        OptionSpec("float", low=0.0, high=1.0, low_open=True),
    )
    anneal_lr: bool = setting(
        True, "anneal the learning rate linearly to 0 over every minibatch step of the run"
    )
    gamma: float = setting(0.99, "the discount", OptionSpec("float", low=0.0, high=1.0))
    gae_lambda: float = setting(0.95, "GAE's lambda", OptionSpec("float", low=0.0, high=1.0))
    clip_eps: float = setting(
        0.2,
        "the clip range of the surrogate's ratio and of the value update",
        OptionSpec("float", low=0.0, high=100.0, low_open=True),
    )
    ent_coef: float = setting(0.01, "the weight of the entropy bonus", _COEF)
    vf_coef: float = setting(0.5, "the weight of the value loss", _COEF)
    max_grad_norm: float = setting(
        0.5,
        "gradients are clipped to this global norm",
        OptionSpec("float", low=0.0, high=1e6, low_open=True),
    )
    normalize_advantages: bool = setting(
        True, "normalise the advantages of each minibatch to mean 0 and standard deviation 1"
    )

    # Network (dilemmax.agents.networks.NetworkSpec).
    shared_params: bool = setting(
        True, "one parameter set for every learner (with agent_id as input), else one each"
    )
    hidden: int = setting(
        64, "the width of the dense layers", OptionSpec("int", low=1, high=65_536)
    )
    num_layers: int = setting(
        2, "dense hidden layers after the encoder", OptionSpec("int", low=0, high=64)
    )
    activation: str = setting(
        "tanh", "the dense layers' activation", OptionSpec("str", choices=("tanh", "relu"))
    )
    embed_dim: int = setting(
        8,
        "the embedding size of each cell code of a grid observation",
        OptionSpec("int", low=1, high=4096),
    )
    conv_features: list[int] = setting(
        help="output channels of each 3x3 convolution over a grid observation; [] flattens the "
        "embedded view straight into the dense layers",
        range=OptionSpec("list", max_len=16, item=OptionSpec("int", low=1, high=4096)),
        default_factory=lambda: [16, 32],
    )
    agent_id: bool = setting(True, "feed a one-hot agent index to the networks")
    conv_impl: str = setting(
        "auto",
        "xla (`lax.conv`), im2col (patches and a matmul) or auto (im2col on the CPU, xla "
        "elsewhere): the same function with the same parameters",
        OptionSpec("str", choices=CONV_IMPLS),
    )
    recurrent: bool = setting(
        False,
        "an RL^2 actor (and, for IPPO, critic) with a GRU memory that persists across the "
        "trials of an episode and resets when a new one starts",
    )
    gru_hidden: int = setting(
        64, "the width of the recurrent memory", OptionSpec("int", low=1, high=65_536)
    )
    init_from: str | None = setting(
        None,
        "a run folder (its newest checkpoint) or a checkpoint file whose parameters a fresh run "
        "starts from, with a fresh optimiser (the same network shapes); --resume ignores it",
        OptionSpec("str", optional=True),
    )

    # The run.
    seed: int = setting(0, "the run's seed", OptionSpec("int", low=0, high=INT32_MAX))
    num_seeds: int = setting(
        1, "seeds trained together in one vmapped program", OptionSpec("int", low=1, high=65_536)
    )
    shard: str = setting(
        "auto",
        "split the env batch over every device of the run: auto (when there is more than one; "
        "a run on several processes always shards), on or off",
        OptionSpec("choice", choices=("auto", "on", "off", True, False)),
    )
    checkpointer: str = setting(
        "auto",
        "the checkpoint format: auto (msgpack files on one process, orbax folders on several), "
        "msgpack or orbax",
        OptionSpec("str", choices=("auto", "msgpack", "orbax")),
    )
    log_every: int = setting(
        10,
        "updates per compiled chunk, the unit of logging, progress and checkpoints",
        _COUNT,
    )
    checkpoint_every: int = setting(5, "chunks between checkpoints (and one at the end)", _COUNT)
    keep_checkpoints: int = setting(3, "the newest checkpoints kept", _COUNT)
    eval_every: int = setting(
        5,
        "chunks between evaluations (and one at the end); 0: none",
        OptionSpec("int", low=0, high=INT32_MAX),
    )
    eval_episodes: int = setting(16, "evaluation episodes per configuration and seed", _COUNT)
    progress: bool = setting(True, "show a progress bar on stderr")
    stall_timeout: float = setting(
        600.0,
        "seconds a chunk may wait with the process idle before the run ends with one line and "
        "exit status 3 (a busy chunk is never ended); 0: never",
        OptionSpec("float", low=0.0, high=1e7),
    )
    wandb: bool = setting(False, "log to Weights & Biases (the wandb extra)")
    wandb_project: str = setting("dilemmax", "the Weights & Biases project")
    wandb_mode: str = setting(
        "online",
        "online, offline (no network needed) or disabled",
        OptionSpec("str", choices=("online", "offline", "disabled")),
    )

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
            try:
                setattr(self, f.name, field_spec(f.name).check(f.name, value, "TrainConfig"))
            except OptionError as error:
                raise explained(error, f.name) from None
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
        # Its grammar and kind now (a model cannot play inside the jitted update, even when
        # every seat learns and no partner plays); the policy is loaded with the env.
        try:
            check_plays_in_jax(self.partner_policy, "training partners")
        except SeatSpecError as error:
            raise OptionError(f"TrainConfig: partner_policy: {error}") from None
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


# Each field's declared range, read from its metadata (a field without one is checked against
# its annotated type).
FIELD_RANGES: dict[str, OptionSpec] = {
    f.name: f.metadata["range"]
    for f in dataclasses.fields(TrainConfig)
    if f.metadata.get("range") is not None
}


def field_doc(name: str) -> str:
    """What TrainConfig field ``name`` means, on one line (its declaration's ``help``)."""
    (found,) = (f for f in dataclasses.fields(TrainConfig) if f.name == name)
    return " ".join(found.metadata.get("help", "").split())


class FieldDescription(NamedTuple):
    """One TrainConfig field as its declaration gives it: what the help and docs list."""

    name: str
    type: str  # the annotation, as written
    default: Any
    allowed: str  # the values its check accepts, in words (field_spec(name).describe())
    doc: str  # what it means, on one line


def describe_fields() -> list[FieldDescription]:
    """Every TrainConfig field, in declaration order: ``dilemmax train --help``'s list of
    ``--set`` keys and docs/training.md's table are made from these."""
    out = []
    for f in dataclasses.fields(TrainConfig):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        allowed = field_spec(f.name).describe()
        out.append(FieldDescription(f.name, str(f.type), default, allowed, field_doc(f.name)))
    return out


def explained(error: OptionError, name: str) -> OptionError:
    """``error`` about field ``name``, with what the field means: still one line."""
    return OptionError(f"{error} ({name}: {field_doc(name)})")


@functools.cache
def _annotations() -> dict[str, str]:
    return {f.name: f.type for f in dataclasses.fields(TrainConfig)}


def field_spec(name: str) -> OptionSpec:
    """What TrainConfig field ``name`` accepts: its declared range, else its annotated type."""
    return merge(FIELD_RANGES.get(name), spec_from_annotation(_annotations().get(name, "Any")))
