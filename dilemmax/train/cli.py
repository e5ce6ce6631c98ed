"""``dilemmax train`` and ``dilemmax evaluate``.

    dilemmax train moral_hazard --algo ippo --set total_timesteps=100000 --out runs/mh
    dilemmax train moral_hazard --out runs/mh --resume          # continue after a crash
    dilemmax evaluate runs/mh                                   # latest checkpoint of a run
    dilemmax evaluate runs/mh/checkpoints/ckpt_000004.msgpack --episodes 64

``--set key=value`` overrides any :class:`~dilemmax.train.config.TrainConfig` field, its value
parsed as that field's type (``env_kwargs.num_agents=3`` or ``env_config.cost=0.2`` reach into
the dict options, typed by the env's options). Everything is checked before a run folder is made
or anything compiles; a mistake is one line on stderr and exit status 2. A second training into
a folder in use, or a fresh one into a folder that holds a run, is refused; ``--resume`` needs
the folder's config.json. A training whose loss or parameters stop being finite stops with
status 1, keeping its last good checkpoint.

``evaluate`` plays the held-out configurations (``--split``, for the grid games, which have
train / held-out pools of layouts and rules); the other games have no split and evaluate on their
evaluation grid. :func:`add_commands` plugs both commands into the main ``dilemmax`` parser;
``python -m dilemmax.train.cli`` runs them on their own.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import jax

from dilemmax.commandline import positive_int, run_parsed, seed_int, user_input
from dilemmax.envs.options import env_option_specs
from dilemmax.envs.registry import env_spec
from dilemmax.errors import UsageError
from dilemmax.train.config import (
    TrainConfig,
    _check_env_kwargs,
    apply_overrides,
    make_config,
    parse_sets,
)
from dilemmax.train.run import CONFIG_FILE, TrainingDiverged, TrainingRun, load_run


def _cmd_train(args) -> int:
    out = (
        Path(args.out)
        if args.out
        else Path("runs") / f"{args.env}-{args.algo}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    # Everything the user gave is checked before a folder is made or anything compiles.
    with user_input(f"train {args.env}"):
        _known_env(args.env)
        overrides = parse_sets(args.set, args.env)
        if args.resume:
            config = _saved_config(out, args, overrides)
        else:
            if (out / CONFIG_FILE).exists():
                raise UsageError(
                    f"{out} already holds a run: continue it with --resume or choose another --out"
                )
            config = make_config(args.env, args.algo, overrides)
        if args.no_progress:
            config.progress = False
        run = TrainingRun(config, out)
    print(
        f"training {config.algo} on {config.env}: {config.num_updates} updates x "
        f"{config.num_envs} envs x {config.num_steps} steps, {config.num_seeds} seed(s) -> {out}"
    )
    created = not out.exists()
    try:
        run.train(resume=args.resume)
    except TrainingDiverged as err:
        print(f"dilemmax train: {err}", file=sys.stderr)
        return 1
    except BaseException:
        # A start that failed before its first checkpoint leaves no half-made run folder.
        if created and not (out / "checkpoints").exists():
            shutil.rmtree(out, ignore_errors=True)
        raise
    records = run.records()
    if records:
        last = records[-1]
        print(
            f"done: {last['env_steps']} env steps; "
            f"final training return {last.get('return/learners')}"
        )
        for key, value in last.items():
            if key.startswith("eval/"):
                print(f"  {key:40s} {value}")
    print(f"run folder: {out} (config.json, metrics.jsonl, checkpoints/, curve.png)")
    return 0


def _known_env(env_id: str) -> None:
    env_spec(env_id)  # ValueError listing the registered ids


def _saved_config(out: Path, args, overrides: dict):
    """The configuration a ``--resume`` continues: the folder's config.json, checked."""
    path = out / CONFIG_FILE
    if not path.exists():
        raise UsageError(f"cannot --resume {out}: it has no {CONFIG_FILE} (not a run folder)")
    try:
        saved = TrainConfig.from_dict(json.loads(path.read_text()))
    except ValueError as err:
        raise UsageError(f"cannot --resume {out}: bad {CONFIG_FILE} ({err})") from None
    saved.validate()
    _check_env_kwargs(saved)
    if overrides or saved.env != args.env or saved.algo != args.algo:
        raise UsageError(
            f"--resume continues {out} with its saved config ({saved.algo} on {saved.env}); "
            "drop --set or choose another --out"
        )
    return saved


def _cmd_evaluate(args) -> int:
    with user_input(f"evaluate {args.path}"):
        run, state, ckpt = load_run(args.path)
        split = _held_out(run, args.split)
        if args.episodes is not None:
            run.config.eval_episodes = args.episodes
        if args.set:
            values = apply_overrides(run.config.to_dict(), parse_sets(args.set, run.config.env))
            run.config.__dict__.update(type(run.config).from_dict(values).__dict__)
            run.config.validate()
    metrics = run.evaluate(state, jax.random.PRNGKey(args.seed), greedy=args.greedy)
    config = run.config
    where = config.eval_grid or "sampled configurations"
    print(
        f"{config.algo} on {config.env} from {ckpt} ({config.num_seeds} seed(s), "
        f"{config.eval_episodes} episode(s) per configuration, {where}, {split}, "
        f"env options {config.eval_env_kwargs or config.env_kwargs or '{}'})"
    )
    for key, value in metrics.items():
        print(f"  {key:32s} {value}")
    out = Path(args.json) if args.json else ckpt.parent.parent / "eval.json"
    out.write_text(json.dumps({"checkpoint": str(ckpt), "metrics": metrics}, indent=2) + "\n")
    print(f"written: {out}")
    return 0


def _held_out(run, split: str) -> str:
    """Sets the evaluation env's ``split`` (default "held_out") where the env has one; returns
    a description of what the evaluation plays."""
    if "split" not in env_option_specs(run.config.env):
        if split != "held_out":
            raise UsageError(f"--split: {run.config.env} has no configuration split")
        return f"{run.config.env} has no held-out split: its evaluation configurations"
    run.config.eval_env_kwargs = {**run.config.eval_env_kwargs, "split": split}
    return f"{split} configurations"


def add_commands(subparsers) -> None:
    """Adds ``train`` and ``evaluate`` to the main parser's subcommands."""
    p = subparsers.add_parser("train", help="train IPPO / MAPPO agents on an env")
    p.add_argument("env", help="environment id (see `dilemmax list`)")
    p.add_argument("--algo", choices=("ippo", "mappo"), default="ippo")
    p.add_argument("--set", action="append", help="config key=value (repeatable)")
    p.add_argument("--out", help="run folder (default runs/<env>-<algo>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)

    p = subparsers.add_parser("evaluate", help="the env's metrics of a trained policy")
    p.add_argument("path", help="a run folder (latest checkpoint) or a checkpoint file")
    p.add_argument(
        "--episodes", type=positive_int, help="episodes per evaluation configuration (>= 1)"
    )
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument(
        "--split",
        choices=("held_out", "train", "all"),
        default="held_out",
        help="configurations to evaluate on, for games with a split (default: held_out)",
    )
    p.add_argument("--greedy", action="store_true", help="most likely action, not a sample")
    p.add_argument("--set", action="append", help="config key=value for evaluation (repeatable)")
    p.add_argument("--json", help="where to write the metrics (default <run>/eval.json)")
    p.set_defaults(func=_cmd_evaluate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dilemmax-train")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run_parsed(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
