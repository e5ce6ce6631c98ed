"""Training configurations: one dataclass for IPPO and MAPPO, defaults per environment.

A config is plain data (JSON round-trips it into a run folder), built as
``make_config(env_id, algo, overrides)``: the dataclass defaults, then the env's defaults from
:data:`ENV_DEFAULTS`, then the user's ``key=value`` overrides (``--set`` on the command line).
"""

from __future__ import annotations

import ast
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from dilemmax.agents.networks import CONV_IMPLS, NetworkSpec


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
        ``partner_policy`` (a name in ``env.scripted_policies()`` or "random"/"first_legal").
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

    Run: num_seeds seeds train in one vmapped program; shard splits the env batch over all local
    devices ("auto": when there is more than one). log_every updates make one compiled chunk
    (the unit of logging, progress and checkpointing); checkpoint_every and eval_every count
    chunks. wandb is off by default (wandb_mode "offline" works without a network).
    """

    env: str = "moral_hazard"
    algo: str = "ippo"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_config: dict[str, Any] = field(default_factory=dict)
    train_grid: str | None = None
    eval_grid: str | None = None
    learners: list[int] | None = None
    partner_policy: str = "random"
    learner_transform: str | None = None
    reward: str = "individual"
    reward_scale: float = 1.0

    total_timesteps: int = 200_000
    num_envs: int = 64
    num_steps: int = 16
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 2.5e-3
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True

    shared_params: bool = True
    hidden: int = 64
    num_layers: int = 2
    activation: str = "tanh"
    embed_dim: int = 8
    conv_features: list[int] = field(default_factory=lambda: [16, 32])
    agent_id: bool = True
    conv_impl: str = "auto"
    recurrent: bool = False
    gru_hidden: int = 64

    seed: int = 0
    num_seeds: int = 1
    shard: str = "auto"
    log_every: int = 10
    checkpoint_every: int = 5
    keep_checkpoints: int = 3
    eval_every: int = 5
    eval_episodes: int = 16
    progress: bool = True
    wandb: bool = False
    wandb_project: str = "dilemmax"
    wandb_mode: str = "online"

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
        if self.algo not in ("ippo", "mappo"):
            raise ValueError(f"algo must be 'ippo' or 'mappo', got {self.algo!r}")
        if self.reward not in ("individual", "team"):
            raise ValueError(f"reward must be 'individual' or 'team', got {self.reward!r}")
        if self.num_envs % self.num_minibatches:
            raise ValueError(
                f"num_envs ({self.num_envs}) must be a multiple of num_minibatches "
                f"({self.num_minibatches}): minibatches split the envs"
            )
        if self.conv_impl not in CONV_IMPLS:
            raise ValueError(f"conv_impl must be one of {CONV_IMPLS}, got {self.conv_impl!r}")
        if self.gru_hidden < 1:
            raise ValueError(f"gru_hidden must be >= 1, got {self.gru_hidden}")
        if self.recurrent and self.learner_transform:
            raise ValueError(
                "recurrent=True does not combine with learner_transform: a scripted step would "
                "leave the memory without the learner's own action"
            )
        if self.shard not in ("auto", "on", "off", True, False):
            raise ValueError(f"shard must be 'auto', 'on' or 'off', got {self.shard!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown config key(s): {', '.join(unknown)}")
        return cls(**values)


# Per-env defaults: sized so that the default run of each env finishes on a laptop CPU and
# shows learning. The grid games take the held-out split for evaluation.
# The two OpenSocialJax games share map scale, horizon and held-out evaluation. Their default
# network embeds every cell's codes and reads the flattened 11x11 view with an MLP: on a CPU it
# trains over 20x faster than the 2-layer CNN (benchmarks/results/learning_conv_cpu.md) and it
# is what produced the learning evidence. On an accelerator the CNN is cheap:
# --set conv_features=[16,32] --set embed_dim=8 --set hidden=128.
_GRID_GAME_DEFAULTS: dict[str, Any] = {
    "total_timesteps": 4_000_000,
    "num_envs": 16,
    "num_steps": 128,
    "lr": 5e-4,
    "ent_coef": 0.01,
    "gamma": 0.99,
    "conv_features": [],
    "embed_dim": 4,
    "hidden": 64,
    "eval_env_kwargs": {"split": "held_out"},
    "eval_episodes": 2,
    "log_every": 5,
}

ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "moral_hazard": {
        "total_timesteps": 300_000,
        "num_envs": 64,
        "num_steps": 16,
        "lr": 2.5e-3,
        "ent_coef": 0.01,
        "gamma": 1.0,
        "gae_lambda": 1.0,
        "train_grid": "condition_grid",
        "eval_grid": "condition_grid",
    },
    "consequence": {
        "total_timesteps": 500_000,
        "num_envs": 64,
        "num_steps": 16,
        "lr": 2.5e-3,
        "ent_coef": 0.01,
        "gamma": 1.0,
        "gae_lambda": 0.95,
        "eval_grid": "context_grid",
        "reward_scale": 1.0 / 13.0,
    },
    "open_cleanup": _GRID_GAME_DEFAULTS,
    "open_harvest": _GRID_GAME_DEFAULTS,
}


def parse_value(text: str) -> Any:
    """``--set`` values: JSON or a Python literal when they parse as one, else the string."""
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError):
            continue
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    return text


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


def parse_sets(pairs: list[str] | None) -> dict[str, Any]:
    """``["lr=1e-3", "env_config.query_cost=0.2"]`` -> ``{"lr": 0.001, ...}``."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = parse_value(value.strip())
    return out


def make_config(
    env: str, algo: str = "ippo", overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """Dataclass defaults, then the env's defaults, then ``overrides``."""
    values = TrainConfig(env=env, algo=algo).to_dict()
    values = apply_overrides(values, ENV_DEFAULTS.get(env, {}))
    values = apply_overrides(values, overrides or {})
    config = TrainConfig.from_dict(values)
    config.validate()
    return config
