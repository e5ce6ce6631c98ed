"""``dilemmax train`` and ``dilemmax evaluate``.

    dilemmax train moral_hazard --algo ippo --set total_timesteps=100000 --out runs/mh
    dilemmax train moral_hazard --out runs/mh --resume          # continue after a crash
    dilemmax evaluate runs/mh                                   # latest checkpoint of a run
    dilemmax evaluate runs/mh/checkpoints/ckpt_000004.msgpack --episodes 64
    dilemmax train moral_hazard --out /shared/mh --coordinator 10.0.0.1:8476 \
        --num-processes 2 --process-id 0         # on each host, its own id (docs/distributed.md)

``--set key=value`` overrides any :class:`~dilemmax.train.config.TrainConfig` field, its value
parsed as that field's type (``env_kwargs.num_agents=3`` or ``env_config.cost=0.2`` reach into
the dict options, typed by the env's options). Everything is checked before a run folder is made
or anything compiles; a mistake is one line on stderr and exit status 2. A second training into
a folder in use, or a fresh one into a folder that holds a run, is refused; ``--resume`` needs
the folder's config.json. A start that fails before its first checkpoint removes the folder only
if it made it and no other run holds it. A training whose loss or parameters stop being finite
stops with status 1, keeping its last good checkpoint. On several processes (``--coordinator``
and friends, or launched by SLURM / Open MPI / a Cloud TPU pod) every process runs the same
command with the same ``--out`` on a shared filesystem; process 0 prints and writes. ``--algo``
and ``--set algo=`` (or the env and ``--set env=``) that disagree are refused.

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
import textwrap
import time
from pathlib import Path

import jax

from dilemmax.commandline import (
    SCENARIO_SETS,
    end_process,
    output_file,
    output_folder,
    positive_int,
    run_parsed,
    seed_int,
    user_input,
    writing,
)
from dilemmax.envs.options import OptionError, env_option_specs, parse_value
from dilemmax.envs.registry import env_spec
from dilemmax.errors import UsageError
from dilemmax.runlock import RunFolderError, RunLock
from dilemmax.train import distributed
from dilemmax.train.config import TrainConfig, describe_fields, field_spec
from dilemmax.train.configure import apply_overrides, check_env_kwargs, make_config, parse_sets
from dilemmax.train.envs import check_evaluation_fits
from dilemmax.train.run import CONFIG_FILE, TrainingDiverged, TrainingRun, load_run


def _cmd_train(args) -> int:
    # Everything the user gave is checked before a folder is made or anything compiles.
    with user_input(f"train {args.env}"):
        # Before anything touches a device: joining the other processes must come first.
        distributed.join(_cluster(args))
        many = jax.process_count() > 1  # joined here, or by the script that called main()
        primary = distributed.is_primary()
        if many and not args.out:
            raise UsageError(
                "a run on several processes needs --out: the same folder for every process, on "
                "a filesystem they share"
            )
        _known_env(args.env)
        overrides = parse_sets(args.set, args.env)
        algo = _chosen_algo(args, overrides)
        out = (
            Path(args.out)
            if args.out
            else Path("runs") / f"{args.env}-{algo}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        if args.resume:
            config = _saved_config(out, args.env, algo, overrides)
        else:
            taken = primary and (out / CONFIG_FILE).exists()
            if not distributed.agree(not taken):
                raise UsageError(
                    f"{out} already holds a run: continue it with --resume or choose another --out"
                )
            config = make_config(args.env, algo, overrides)
        if args.no_progress:
            config.progress = False
        if args.stall_timeout is not None:
            config.stall_timeout = args.stall_timeout
        run = TrainingRun(config, out)
    created = output_folder(out, "--out")[1] if primary else False
    try:
        if primary:
            where = f", {distributed.describe()} each" if many else ""
            print(
                f"training {config.algo} on {config.env}: {config.num_updates} updates x "
                f"{config.num_envs} envs x {config.num_steps} steps, {config.num_seeds} seed(s)"
                f"{where} -> {out}"
            )
        run.train(resume=args.resume)
    except TrainingDiverged as err:
        if primary:
            print(f"dilemmax train: {err}", file=sys.stderr)
        return 1
    except BaseException:
        if created:
            _remove_unstarted(out)
        raise
    if not primary:
        return 0
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


def _cluster(args) -> distributed.Cluster:
    return distributed.Cluster(
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        mode=args.distributed,
        heartbeat_timeout=args.heartbeat_timeout,
        init_timeout=args.init_timeout,
    )


def _chosen_algo(args, overrides: dict) -> str:
    """The algorithm of ``--algo`` (default ippo) or of ``--set algo=``; both, disagreeing, is a
    mistake, not a silent win for ``--set``. The same for ``--set env=`` beside the env given."""
    for key, given, flag in (("algo", args.algo, "--algo"), ("env", args.env, "the env argument")):
        if key in overrides and given is not None and overrides[key] != given:
            raise UsageError(
                f"--set {key}={overrides[key]} contradicts {flag} {given}; give one of them"
            )
    return args.algo or overrides.get("algo", "ippo")


def _remove_unstarted(out: Path) -> None:
    """Removes the run folder this start created, when the start failed before its first
    checkpoint, so a failed start leaves no half-made folder.

    Only while holding the folder's lock: another start on the same folder may have taken the
    lock first (this one then failed on it) and be writing there now; its folder is left alone.
    ``run.train`` has released its own hold by now, so the lock is taken again, not kept.
    """
    try:
        lock = RunLock(out, "training").acquire()
    except (RunFolderError, OSError):
        return
    try:
        if not (out / "checkpoints").exists():
            shutil.rmtree(out, ignore_errors=True)
    finally:
        lock.release()


def _known_env(env_id: str) -> None:
    env_spec(env_id)  # ValueError listing the registered ids


def _saved_config(out: Path, env: str, algo: str, overrides: dict):
    """The configuration a ``--resume`` continues: the folder's config.json, checked."""
    path = out / CONFIG_FILE
    if not path.exists():
        raise UsageError(f"cannot --resume {out}: it has no {CONFIG_FILE} (not a run folder)")
    try:
        saved = TrainConfig.from_dict(json.loads(path.read_text()), str(out))
    except ValueError as err:
        raise UsageError(f"cannot --resume {out}: bad {CONFIG_FILE} ({err})") from None
    saved.validate()
    check_env_kwargs(saved)
    if overrides or saved.env != env or saved.algo != algo:
        raise UsageError(
            f"--resume continues {out} with its saved config ({saved.algo} on {saved.env}); "
            "drop --set or choose another --out"
        )
    return saved


def _cmd_evaluate(args) -> int:
    # An explicit --json is checked before the checkpoint is read; the default one (in the run
    # folder) once the run folder is known: either way before the evaluation compiles.
    out = output_file(args.json, "--json") if args.json else None
    with user_input(f"evaluate {args.path}"):
        run, state, ckpt = load_run(args.path)
        split = _held_out(run, args.split)
        if args.episodes is not None:
            run.config.eval_episodes = args.episodes
        if args.set:
            overrides = parse_sets(args.set, run.config.env)
            _same_network(run.config, overrides)
            values = apply_overrides(run.config.to_dict(), overrides)
            run.config.__dict__.update(type(run.config).from_dict(values).__dict__)
            run.config.validate()
        _network_fits(run)
        check_evaluation_fits(run.config, run.trainer)
    if out is None:
        out = output_file(ckpt.parent.parent / "eval.json", "--json (default <run>/eval.json)")
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
    with writing(out, "--json"):
        out.write_text(json.dumps({"checkpoint": str(ckpt), "metrics": metrics}, indent=2) + "\n")
    print(f"written: {out}")
    return 0


def _same_network(config: TrainConfig, overrides: dict) -> None:
    """Refuses an evaluation ``--set`` of the env or the algorithm: the checkpoint holds the
    network trained for the run's own, and its trainer is already built for them."""
    for key in ("env", "algo"):
        if key in overrides and overrides[key] != getattr(config, key):
            raise UsageError(
                f"--set {key}={overrides[key]}: this run was trained as {config.algo} on "
                f"{config.env}; evaluate plays its own network, so {key} cannot change"
            )


def _network_fits(run) -> None:
    """Refuses an evaluation env the run's network cannot play (``--set env_kwargs.num_agents=5``
    on a 3-agent run): other agents, observation shapes or action counts than it trained on."""
    trained, evaluated = run.trainer.env, run.trainer.eval_env()
    if _seats(trained) != _seats(evaluated):
        kwargs = {**run.config.env_kwargs, **run.config.eval_env_kwargs}
        raise UsageError(
            f"the evaluation env ({run.config.env} with {kwargs or 'no options'}) does not fit "
            f"the run's network: it trained with {_describe(trained)}, the evaluation env has "
            f"{_describe(evaluated)}"
        )


def _seats(env) -> list[tuple]:
    """(agent, observation shape, number of actions) of each seat: what a network depends on."""
    return [
        (a, tuple(env.observation_space(a).shape), int(env.action_space(a).n)) for a in env.agents
    ]


def _describe(env) -> str:
    first = env.agents[0]
    obs, actions = tuple(env.observation_space(first).shape), env.action_space(first).n
    return f"{env.num_agents} agents, observations {obs}, {actions} actions"


def _held_out(run, split: str | None) -> str:
    """Sets the evaluation env's ``split`` where the env has one (None: the game's
    ``evaluation_options``, the held-out part); returns a description of what the evaluation
    plays."""
    if "split" not in env_option_specs(run.config.env):
        if split not in (None, "held_out"):
            raise UsageError(f"--split: {run.config.env} has no configuration split")
        return f"{run.config.env} has no held-out split: its evaluation configurations"
    if split is None:
        split = env_spec(run.config.env).load().evaluation_options.get("split", "held_out")
    run.config.eval_env_kwargs = {**run.config.eval_env_kwargs, "split": split}
    return f"{split} configurations"


def add_commands(subparsers) -> None:
    """Adds ``train`` and ``evaluate`` to the main parser's subcommands."""
    p = subparsers.add_parser(
        "train",
        help="train IPPO / MAPPO agents on an env",
        epilog=_config_keys(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("env", help="environment id (see `dilemmax list`)")
    p.add_argument("--algo", choices=("ippo", "mappo"), help="the algorithm (default: ippo)")
    p.add_argument(
        "--set", action="append", help="config key=value (repeatable; the keys are listed below)"
    )
    p.add_argument("--out", help="run folder (default runs/<env>-<algo>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--stall-timeout",
        type=_stall_timeout,
        metavar="SECONDS",
        help="end the run when a chunk waits this long with the process idle (a stalled "
        "computation); 0: never (default: the config's stall_timeout, 600)",
    )
    _add_cluster_options(p)
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
        help="configurations to evaluate on, for games with a split (default: held_out)",
    )
    p.add_argument("--greedy", action="store_true", help="most likely action, not a sample")
    p.add_argument(
        "--scenarios",
        choices=SCENARIO_SETS,
        help="score the run's focal seats on the game's scenario set instead (held-out "
        "background populations; the same as `dilemmax scenarios evaluate --run`)",
    )
    p.add_argument("--set", action="append", help="config key=value for evaluation (repeatable)")
    p.add_argument("--json", help="where to write the metrics (default <run>/eval.json)")
    p.set_defaults(func=_cmd_evaluate)


def _config_keys() -> str:
    """The end of ``train --help``: every TrainConfig field (a ``--set`` key) with its default,
    meaning and allowed values, read from the fields' declarations."""
    head = (
        "config keys: --set KEY=VALUE, each shown with its default and allowed values (a game's "
        "own defaults replace some: docs/training.md; --set replaces both); lists and dicts in "
        "Python or JSON syntax, env options as env_kwargs.<option>=VALUE"
    )
    lines = [*textwrap.wrap(head, 98), ""]
    for field in describe_fields():
        default = field.default if isinstance(field.default, str) else repr(field.default)
        lines += textwrap.wrap(f"{field.name}={default} ({field.allowed})", 98, initial_indent="  ",
                               subsequent_indent="      ")  # fmt: skip
        lines += textwrap.wrap(field.doc, 98, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def _add_cluster_options(p) -> None:
    """The options of a run on several processes (docs/distributed.md)."""
    g = p.add_argument_group("several processes (jax.distributed)")
    g.add_argument("--coordinator", help="host:port of process 0's coordination service")
    g.add_argument("--num-processes", type=positive_int, help="processes of the run")
    g.add_argument("--process-id", type=_process_id, help="this process's index, from 0")
    g.add_argument(
        "--distributed",
        choices=("auto", "on", "off"),
        default="auto",
        help="auto: join when --coordinator is given or SLURM / Open MPI / a TPU pod launched "
        "several tasks; on: always (JAX detects the cluster); off: one process",
    )
    g.add_argument(
        "--heartbeat-timeout",
        type=positive_int,
        default=100,
        help="seconds without a peer's heartbeat before every process stops (default 100)",
    )
    g.add_argument(
        "--init-timeout",
        type=positive_int,
        default=300,
        help="seconds to wait for the coordinator to listen and every process to join "
        "(default 300)",
    )


def _stall_timeout(text: str) -> float:
    """--stall-timeout: a TrainConfig stall_timeout, checked by the field's own range."""
    try:
        return parse_value(text, field_spec("stall_timeout"), "--stall-timeout")
    except OptionError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _process_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**20:
        raise argparse.ArgumentTypeError(f"expected an index from 0, got {text[:40]!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dilemmax-train")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run_parsed(parser.parse_args(argv))


if __name__ == "__main__":
    end_process(main())  # the process itself: an interrupted run leaves at once (commandline)
