"""``dilemmax train`` and ``dilemmax evaluate``.

    dilemmax train moral_hazard --algo ippo --set total_timesteps=100000 --out runs/mh
    dilemmax train moral_hazard --out runs/mh --resume          # continue after a crash
    dilemmax evaluate runs/mh                                   # latest checkpoint of a run
    dilemmax evaluate runs/mh/checkpoints/ckpt_000004.msgpack --episodes 64

``--set key=value`` overrides any :class:`~dilemmax.train.config.TrainConfig` field (values are
JSON or Python literals; ``env_kwargs.num_agents=3`` or ``env_config.cost=0.2`` reach into the
dict options). :func:`add_commands` plugs both commands into the main ``dilemmax`` parser;
``python -m dilemmax.train.cli`` runs them on their own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _cmd_train(args) -> int:
    from dilemmax.train.config import TrainConfig, make_config, parse_sets
    from dilemmax.train.run import CONFIG_FILE, TrainingRun

    out = (
        Path(args.out)
        if args.out
        else Path("runs") / f"{args.env}-{args.algo}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    overrides = parse_sets(args.set)
    if args.resume and (out / CONFIG_FILE).exists():
        saved = TrainConfig.from_dict(json.loads((out / CONFIG_FILE).read_text()))
        if overrides or saved.env != args.env or saved.algo != args.algo:
            raise SystemExit(
                f"--resume continues {out} with its saved config ({saved.algo} on {saved.env}); "
                "drop --set or choose another --out"
            )
        config = saved
    else:
        config = make_config(args.env, args.algo, overrides)
    if args.no_progress:
        config.progress = False
    run = TrainingRun(config, out)
    print(
        f"training {config.algo} on {config.env}: {config.num_updates} updates x "
        f"{config.num_envs} envs x {config.num_steps} steps, {config.num_seeds} seed(s) -> {out}"
    )
    run.train(resume=args.resume)
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


def _cmd_evaluate(args) -> int:
    import jax

    from dilemmax.train.run import load_run

    run, state, ckpt = load_run(args.path)
    if args.episodes is not None:
        run.config.eval_episodes = args.episodes
    if args.set:
        from dilemmax.train.config import parse_sets

        for key, value in parse_sets(args.set).items():
            head, _, rest = key.partition(".")
            if rest:
                getattr(run.config, head)[rest] = value
            else:
                setattr(run.config, head, value)
    metrics = run.evaluate(state, jax.random.PRNGKey(args.seed), greedy=args.greedy)
    config = run.config
    where = config.eval_grid or "sampled configurations"
    print(
        f"{config.algo} on {config.env} from {ckpt} ({config.num_seeds} seed(s), "
        f"{config.eval_episodes} episode(s) per configuration, {where}, "
        f"env options {config.eval_env_kwargs or config.env_kwargs or '{}'})"
    )
    for key, value in metrics.items():
        print(f"  {key:32s} {value}")
    out = Path(args.json) if args.json else ckpt.parent.parent / "eval.json"
    out.write_text(json.dumps({"checkpoint": str(ckpt), "metrics": metrics}, indent=2) + "\n")
    print(f"written: {out}")
    return 0


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
    p.add_argument("--episodes", type=int, help="episodes per evaluation configuration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--greedy", action="store_true", help="most likely action, not a sample")
    p.add_argument("--set", action="append", help="config key=value for evaluation (repeatable)")
    p.add_argument("--json", help="where to write the metrics (default <run>/eval.json)")
    p.set_defaults(func=_cmd_evaluate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dilemmax-train")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
