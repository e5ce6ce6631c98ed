"""The ``dilemmax`` command: list envs, play rollouts, train and evaluate agents."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np


def parse_assignments(pairs: list[str] | None, what: str = "--set") -> dict:
    """``["num_agents=5", "rule='RP'"]`` -> ``{"num_agents": 5, "rule": "RP"}``.

    Values are Python literals where they parse as one, strings otherwise.
    """
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SystemExit(f"{what} expects key=value, got {pair!r}")
        name, raw = pair.split("=", 1)
        try:
            out[name] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[name] = raw
    return out


def _cmd_list(args) -> int:
    from dilemmax.envs.registry import env_spec, registered_envs

    for env_id in registered_envs():
        print(f"{env_id:14s} {env_spec(env_id).summary}")
    return 0


def available_policies(env) -> dict:
    from dilemmax.agents.policy import GENERIC_POLICIES

    return {**GENERIC_POLICIES, **env.scripted_policies()}


def _format_metric(value) -> str:
    value = np.asarray(value)
    if value.ndim == 0:
        return f"{float(value):.4g}"
    text = np.array2string(value, precision=4, separator=", ", max_line_width=100)
    return text.replace("\n", "\n" + " " * 35)


def _cmd_rollout(args) -> int:
    import jax

    import dilemmax
    from dilemmax.agents.arena import Arena, save_gif

    env = dilemmax.make(args.env, **parse_assignments(args.set))
    choices = available_policies(env)
    seats = {agent: args.policy for agent in env.agents}
    seats.update(parse_assignments(args.seat, "--seat"))
    for agent, name in seats.items():
        if agent not in env.agents:
            raise SystemExit(f"--seat names unknown agent {agent!r}; agents: {env.agents}")
        if name not in choices:
            raise SystemExit(
                f"unknown policy {name!r} for {args.env}; choose from {sorted(choices)}"
            )
    arena = Arena(env, {agent: choices[name] for agent, name in seats.items()})
    result = arena.run(
        jax.random.key(args.seed),
        args.episodes,
        record=args.out,
        gif_episodes=1 if args.gif else 0,
    )
    print(f"{args.env}: {args.episodes} episode(s), seats {seats}, seed {args.seed}")
    summary = result.summary()
    for name, value in summary.items():
        print(f"  {name:32s} {_format_metric(value)}")
    if args.gif:
        print(f"  gif: {save_gif(result.frames, args.gif, fps=args.fps, scale=args.gif_scale)}")
    if args.out:
        print(f"  transcript: {args.out}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({k: np.asarray(v).tolist() for k, v in summary.items()}, indent=2)
        )
    return 0


COMMAND_MODULES = (
    "dilemmax.train.cli",
    "dilemmax.llm.cli",
    "dilemmax.analysis.cli",
    "dilemmax.finetune.cli",
)


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is absent
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dilemmax", description="Multi-agent social dilemmas in JAX."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered environments")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("rollout", help="play episodes with scripted or random policies")
    p.add_argument("env", help="environment id (see `dilemmax list`)")
    p.add_argument("--policy", default="random", help="policy of every seat (default: random)")
    p.add_argument("--seat", action="append", help="agent=policy for one seat (repeatable)")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", help="env option key=value (repeatable)")
    p.add_argument("--out", help="write every step to this JSONL transcript")
    p.add_argument("--gif", help="write the first episode as an animated GIF (grid games)")
    p.add_argument("--gif-scale", type=int, default=3, help="pixel enlargement of GIF frames")
    p.add_argument("--fps", type=int, default=8, help="GIF frames per second")
    p.add_argument("--json", help="write the metric summary to this JSON file")
    p.set_defaults(func=_cmd_rollout)

    # Other commands live with what they run (training, language-model play, red-teaming,
    # fine-tuning): each module's ``add_commands(subparsers)`` adds its own, when it exists.
    for module in COMMAND_MODULES:
        if _module_exists(module):
            importlib.import_module(module).add_commands(sub)
    return parser


def enable_compilation_cache() -> None:
    """Keeps compiled programs on disk between runs (env builds and steps compile once)."""
    import os

    import jax

    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dilemmax" / "jax"
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    enable_compilation_cache()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
