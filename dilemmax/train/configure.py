"""Making a :class:`~dilemmax.train.config.TrainConfig` for a game: the dataclass defaults,
then the game's own (declared on its env class: ``training_defaults`` and
``evaluation_options``, :func:`game_defaults`), then the user's ``key=value`` overrides
(``--set`` on the command line, typed by what each sets: :func:`parse_sets`), the result checked
against the env's options (:func:`check_env_kwargs`) before anything compiles.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any

from dilemmax.envs.option_spec import shown
from dilemmax.envs.options import (
    OptionError,
    OptionSpec,
    check_env_options,
    env_option_specs,
    parse_value,
)
from dilemmax.envs.registry import env_spec, renamed_option
from dilemmax.train.config import TrainConfig, explained, field_doc, field_spec
from dilemmax.train.envs import check_override_ranges


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
        spec = _spec_for_key(key, env)
        try:
            out[key] = parse_value(text, spec, key)
        except OptionError as error:
            raise (error if "." in key else explained(error, key)) from None
    return out


def _spec_for_key(key: str, env: str | None) -> OptionSpec | None:
    head, _, rest = key.partition(".")
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    if head not in names:
        close = difflib.get_close_matches(head, names, n=1)
        hint = f" (did you mean {close[0]!r}: {field_doc(close[0])}?)" if close else ""
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
