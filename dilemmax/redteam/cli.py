"""``dilemmax redteam ...``: the institutional red-teaming pipeline from the command line.

    dilemmax redteam reference --out ref.npz            # UR_ref, 228 contexts x 5 rules x 4 eps
    dilemmax redteam play --policy starve_then_cover --out pop.npz
    dilemmax redteam play --policy openai:my-model --base-url http://localhost:8000/v1 \
        --contexts 12 --episodes 1 --out runs/my-model    # transcript.jsonl + population.npz
    dilemmax redteam gap --reference ref.npz --population pop.npz [more.npz ...] --out DIR
    dilemmax redteam ablate --policy threshold_aware --out DIR
    dilemmax redteam label runs/my-model [more runs ...] --out labels   # rationale shares
    dilemmax redteam certify --population pop.npz --context 1,5,6:10 --context 2,4,6:6 \
        --rules AON RE PP --budget-collapse 0.05 --budget-exploitation 0.05 --out case

Populations are ``.npz`` files of per-episode metrics with rule and context indices
(:class:`dilemmax.redteam.statistics.Population`); any source (arena, trained agents, a language
model's transcript turned into arrays) can write one.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from dilemmax.commandline import (
    int_in,
    output_file,
    output_folder,
    parse_assignments,
    positive_int,
    seed_int,
)
from dilemmax.envs.consequence.constants import RULE_NAMES
from dilemmax.envs.consequence.generator import context_table
from dilemmax.envs.memory import check_episodes_fit, check_waves_fit
from dilemmax.envs.registry import make
from dilemmax.errors import UsageError
from dilemmax.llm.client import FatalClientError
from dilemmax.llm.seats import add_model_arguments, build_seat
from dilemmax.llm.transcript import Transcript, TranscriptMismatch
from dilemmax.redteam import ablations as A
from dilemmax.redteam import inputs, label_cli, paper_tables
from dilemmax.redteam import reference as ref
from dilemmax.redteam import safety_case as SC
from dilemmax.redteam.ablations import ABLATIONS
from dilemmax.redteam.figures import write_table
from dilemmax.redteam.gap import write_gap_report
from dilemmax.redteam.populations import (
    grid_population,
    llm_ablation_play,
    llm_population,
    resolve_policy,
    spread_contexts,
)
from dilemmax.redteam.reference import EPSILONS, PRIMARY_EPSILON
from dilemmax.runlock import RunLock


def _parse_context(text: str, total: int = 12) -> tuple[tuple[int, ...], int]:
    """'1,5,6:10' -> ((1, 5, 6), 10), with a clear error naming what was wrong."""
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"context {text!r}: expected 'w1,w2,w3:T', e.g. '1,5,6:10'")
    try:
        levels = tuple(sorted(int(v) for v in parts[0].split(",")))
        threshold = int(parts[1])
    except ValueError as err:
        raise ValueError(f"context {text!r}: resources and T must be integers") from err
    if len(levels) != 3 or min(levels) < 0 or sum(levels) != total:
        raise ValueError(f"context {text!r}: need three amounts >= 0 summing to W = {total}")
    if not 1 <= threshold <= total:
        raise ValueError(f"context {text!r}: T must be in 1..{total}")
    return levels, threshold


def context_index(levels, threshold: int, total: int = 12) -> int:
    """Index of (w, T) in the benchmark grid."""
    resources, thresholds = context_table(total, 3)
    hits = np.flatnonzero(
        np.all(resources == np.asarray(levels), axis=1) & (thresholds == threshold)
    )
    return int(hits[0])


def _game(args):
    """The consequence env of --rounds and --endgame, checked against the env's option ranges."""
    try:
        return make("consequence", num_rounds=args.rounds, endgame=args.endgame)
    except UsageError as err:
        raise UsageError(f"--rounds {args.rounds}: {err}") from None


def _npz_name(path: str) -> str:
    """The name numpy's savez writes ``path`` under (it adds ``.npz`` when missing)."""
    return path if path.endswith(".npz") else f"{path}.npz"


def _cmd_reference(args) -> int:
    _game(args)
    output_file(args.out, "--out")
    start = time.perf_counter()
    table = ref.reference_grid(
        epsilons=tuple(args.epsilons), num_rounds=args.rounds, endgame=args.endgame
    )
    seconds = time.perf_counter() - start
    ref.save_reference(table, args.out)
    header, rows = ref.summary_table(table)
    write_table(Path(args.out).with_suffix(""), header, rows)
    print(
        f"reference over {len(table.thresholds)} contexts in {seconds:.0f}s; "
        f"stages without a pure equilibrium: {table.fallback_stages}; written {args.out}"
    )
    return 0


MODEL_KINDS = ("openai:", "hf:")
# Bootstrap and permutation draws: the paper's 10,000 is the default; every draw holds one
# resampled context index per context (and the permutation test a float per population too), so
# a million would already need gigabytes.
RESAMPLES = int_in(1, 100_000)


def _policy(spec: str, env):
    """The scripted / reference / trained policy ``spec`` names; UsageError (exit 2) naming the
    known ones otherwise."""
    try:
        return resolve_policy(spec, env)
    except (ValueError, OSError) as error:
        raise UsageError(f"--policy {spec}: {error}") from None


def _cmd_play(args) -> int:
    if args.policy.startswith(MODEL_KINDS):
        return _cmd_play_model(args)
    env_kwargs = {"num_rounds": args.rounds, "endgame": args.endgame}
    env = _game(args)
    cells = len(context_table()[1]) * len(RULE_NAMES)  # every context under every rule
    check_episodes_fit(env, cells * args.episodes, "redteam play", "--episodes")
    policy = _policy(args.policy, env)
    out = output_file(_npz_name(args.out), "--out")
    pop = grid_population(
        args.name or args.policy, policy, args.episodes, args.seed, env_kwargs=env_kwargs
    )
    pop.save(out)
    print(f"{pop.name}: {len(pop.rule_index)} episodes written to {out}")
    return 0


@contextlib.contextmanager
def _model_run(out: Path, what: str, identity: dict, args, total: int):
    """(transcript, progress bar) of a language-model run in the folder ``out``, held locked
    while it runs; ``args.resume`` continues the transcript there."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(RunLock(out, what))
        transcript = stack.enter_context(
            Transcript(out / "transcript.jsonl", identity, resume=args.resume)
        )
        bar = stack.enter_context(
            tqdm(total=total, unit="episode", disable=args.no_progress, file=sys.stderr)
        )
        yield transcript, bar


def _run_folder(args) -> Path:
    """The --out run folder of a language-model run, checked before any model is loaded: writable,
    and holding the transcript to continue when --resume asks to (else every call would be paid
    for again, silently)."""
    if args.resume and not (Path(args.out) / "transcript.jsonl").is_file():
        raise UsageError(
            f"--resume: {args.out} holds no transcript.jsonl to continue; "
            "leave --resume out to start this run"
        )
    out, created = output_folder(args.out, "--out")
    if created:  # made only to check it: a setup that fails after this leaves nothing behind
        out.rmdir()
    return out


def _cmd_play_model(args) -> int:
    """A language-model population (the model in every seat) through batched play; ``--out`` is
    a run folder holding ``transcript.jsonl`` (``--resume`` continues it) and ``population.npz``."""
    env_kwargs = {"num_rounds": args.rounds, "endgame": args.endgame}
    try:
        if args.episodes < 1 or args.envs < 1:
            raise UsageError("--episodes and --envs must be >= 1")
        contexts = spread_contexts(args.contexts)
        protocol = parse_assignments(args.protocol, "--protocol")
        _game(args).text_protocol(**protocol)  # checks the flags
        total = len(contexts) * len(args.rules) * args.episodes
        check_waves_fit(_game(args), args.envs, total, "redteam play", "--envs or --episodes")
        out = _run_folder(args)
        seat = build_seat(args.policy, None, args, {})
    except (UsageError, ValueError, TypeError, FatalClientError) as error:
        print(f"dilemmax redteam play: error: {error}", file=sys.stderr)
        return 2
    identity = {
        "command": "redteam play",
        "policy": args.policy,
        "contexts": contexts.tolist(),
        "rules": list(args.rules),
        "episodes": args.episodes,
        "seed": args.seed,
        "env": env_kwargs,
        "protocol": protocol,
        "sampling": [args.temperature, args.top_p, args.max_tokens, args.model_seed],
    }
    total = len(contexts) * len(args.rules) * args.episodes
    try:
        with _model_run(out, "play", identity, args, total) as (transcript, bar):
            pop = llm_population(
                args.name or args.policy, seat, contexts, args.episodes, args.seed,
                tuple(args.rules), env_kwargs, protocol, args.envs, transcript, bar,
            )  # fmt: skip
    except (UsageError, FatalClientError, TranscriptMismatch, FileExistsError) as error:
        print(f"dilemmax redteam play: error: {error}", file=sys.stderr)
        return 2
    pop.save(out / "population.npz")
    (out / "population.json").write_text(json.dumps({"name": pop.name, **pop.meta}, indent=1))
    fatality = pop.cell_means("fatality")
    rates = ", ".join(f"{r} {np.nanmean(fatality[k]):.3f}" for k, r in enumerate(pop.rules))
    print(f"{pop.name}: {len(pop.rule_index)} episodes; fatality {rates}")
    print(f"written {out / 'population.npz'} and {out / 'transcript.jsonl'}")
    return 0


def _cmd_gap(args) -> int:
    reference, pops = inputs.gap_inputs(args)
    out = output_folder(args.out, "--out")[0]
    report = write_gap_report(pops, reference, out, args.seed, args.resamples, args.epsilon)
    for name, entry in report["populations"].items():
        gaps = entry["iag"][str(args.epsilon)]
        text = ", ".join(
            f"{r} {g['mean']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]" for r, g in gaps.items()
        )
        print(f"{name}: IAG {text}")
    print(f"written {args.out}")
    return 0


def _write_ablations(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablations.json").write_text(json.dumps(report, indent=1))
    header, rows = A.ablation_table(report)
    write_table(out / "ablations", header, rows)
    (out / "table4.md").write_text(paper_tables.table4(report))
    print(f"written {out}")


def _cmd_ablate(args) -> int:
    if args.policy.startswith(MODEL_KINDS):
        return _cmd_ablate_model(args)
    _policy(args.policy, make("consequence"))  # a bad name fails before any play
    # Each arm and rule plays its contexts' episodes in one compiled program.
    per_program = len(A.ablation_contexts()) * args.episodes
    check_episodes_fit(make("consequence"), per_program, "redteam ablate", "--episodes")
    out = output_folder(args.out, "--out")[0]
    play = A.arena_population(lambda env, arm, rule: resolve_policy(args.policy, env))
    report = A.run_ablations(
        play,
        args.ablations,
        args.rules,
        episodes=args.episodes,
        seed=args.seed,
        num_resamples=args.resamples,
    )
    _write_ablations(report, out)
    return 0


def _cmd_ablate_model(args) -> int:
    """Prompt ablations of a language model (seated everywhere) through batched play; ``--out``
    holds ``transcript.jsonl`` (every call, one part per arm and rule; ``--resume`` continues
    it), ``ablations.json`` and the table."""
    try:
        if args.episodes < 1 or args.envs < 1:
            raise UsageError("--episodes and --envs must be >= 1")
        rules = list(args.rules)
        arms = {arm for name in args.ablations for arm in A.ABLATIONS[name]}
        total = len(arms) * len(rules) * len(A.ablation_contexts()) * args.episodes
        what = "redteam ablate"
        check_waves_fit(make("consequence"), args.envs, total, what, "--envs or --episodes")
        out = _run_folder(args)
        seat = build_seat(args.policy, None, args, {})
    except (UsageError, ValueError, TypeError, FatalClientError) as error:
        print(f"dilemmax redteam ablate: error: {error}", file=sys.stderr)
        return 2
    contexts = A.ablation_contexts()
    arms = {arm for name in args.ablations for arm in A.ABLATIONS[name]}
    identity = {
        "command": "redteam ablate",
        "policy": args.policy,
        "ablations": list(args.ablations),
        "rules": rules,
        "episodes": args.episodes,
        "seed": args.seed,
        "sampling": [args.temperature, args.top_p, args.max_tokens, args.model_seed],
    }
    total = len(arms) * len(rules) * len(contexts) * args.episodes
    try:
        with _model_run(out, "ablation", identity, args, total) as (transcript, bar):
            play = llm_ablation_play(lambda env, arm, rule: seat, args.envs, transcript, bar)
            report = A.run_ablations(
                play, args.ablations, rules, contexts, args.episodes, args.seed, args.resamples
            )
    except (UsageError, FatalClientError, TranscriptMismatch, FileExistsError) as error:
        print(f"dilemmax redteam ablate: error: {error}", file=sys.stderr)
        return 2
    report["policy"] = args.policy
    _write_ablations(report, out)
    return 0


def _cmd_certify(args) -> int:
    try:
        contexts = [_parse_context(c) for c in args.context]
    except ValueError as err:
        print(f"dilemmax redteam certify: error: --context {err}")
        return 2
    pop = inputs.certify_evidence(args.population)
    for suffix in (".md", ".json"):  # the two files of the case, checked before any work
        output_file(Path(args.out).with_suffix(suffix), "--out")
    deployment = SC.Deployment(
        name=args.name,
        contexts=[context_index(w, t) for w, t in contexts],
        context_labels=[f"w={w} T={t}" for w, t in contexts],
        rules=[r.upper() for r in args.rules],
        population=args.population_id or pop.name,
        prompt=args.prompt,
    )
    budgets = SC.Budgets(args.budget_collapse, args.budget_exploitation)
    case = SC.safety_case(pop, deployment, budgets, args.level, args.min_episodes)
    paths = SC.write_safety_case(case, Path(args.out))
    cert = case["certification"]["certified_rules"]
    why = "" if cert else f" ({SC.too_few_episodes(case) or 'see the refused rules'})"
    print(f"certified: {cert or 'none'}{why}; written {', '.join(map(str, paths))}")
    return 0


POLICY_HELP = (
    "scripted name, reference[@EPS], a trained run folder, or a language model "
    "(openai:<model>, hf:<model folder>[,adapter=<folder>]) seated in every position"
)


def _add_model_run_arguments(group) -> None:
    """The options of a language-model run folder: batch size, resume, progress, the model's."""
    group.add_argument(
        "--envs", type=positive_int, default=16, help="environments stepped together"
    )
    group.add_argument("--resume", action="store_true", help="continue the run in --out")
    group.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_arguments(group)


def add_commands(subparsers) -> None:
    """Adds ``redteam`` with its subcommands to the main parser."""
    red = subparsers.add_parser("redteam", help="institutional red-teaming of consequence rules")
    sub = red.add_subparsers(dest="redteam_command", required=True)

    p = sub.add_parser("reference", help="UR_ref of the cooperative-refinement reference")
    p.add_argument("--out", default="reference.npz")
    p.add_argument("--epsilons", type=inputs.epsilon, nargs="+", default=list(EPSILONS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--endgame", choices=("all", "rule"), default="all")
    p.set_defaults(func=_cmd_reference)

    p = sub.add_parser("play", help="play a population over the 228 contexts x 5 rules")
    p.add_argument(
        "--policy",
        required=True,
        help=POLICY_HELP,
    )
    p.add_argument("--name")
    p.add_argument("--episodes", type=positive_int, default=4, help="episodes per cell")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--endgame", choices=("all", "rule"), default="all")
    p.add_argument(
        "--out", required=True, help="population .npz; for a model, a run folder (transcript)"
    )
    model = p.add_argument_group("language-model populations (openai: / hf: policies)")
    model.add_argument(
        "--contexts",
        type=positive_int,
        help="play N contexts spread over the grid (default all 228)",
    )
    model.add_argument("--rules", nargs="+", default=list(RULE_NAMES), choices=RULE_NAMES)
    model.add_argument(
        "--protocol", action="append", help="prompt variant, e.g. anonymous=true, goal=survival"
    )
    _add_model_run_arguments(model)
    p.set_defaults(func=_cmd_play)

    p = sub.add_parser("gap", help="IAG, statistics, figures for populations")
    p.add_argument("--reference", required=True)
    p.add_argument("--population", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epsilon", type=inputs.epsilon, default=PRIMARY_EPSILON)
    p.add_argument("--resamples", type=RESAMPLES, default=10_000)
    p.add_argument("--seed", type=seed_int, default=0)
    p.set_defaults(func=_cmd_gap)

    p = sub.add_parser("ablate", help="named vs anonymous, neutral wording, goal frames")
    p.add_argument(
        "--policy",
        required=True,
        help=POLICY_HELP,
    )
    p.add_argument("--ablations", nargs="+", default=list(ABLATIONS), choices=list(ABLATIONS))
    p.add_argument("--rules", nargs="+", default=["RP", "PP"], choices=RULE_NAMES)
    p.add_argument("--episodes", type=positive_int, default=4)
    p.add_argument("--resamples", type=RESAMPLES, default=10_000)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--out", required=True, help="folder: ablations.json, the table, transcript")
    model = p.add_argument_group("language-model populations (openai: / hf: policies)")
    _add_model_run_arguments(model)
    p.set_defaults(func=_cmd_ablate)

    label_cli.add_command(sub, RESAMPLES)

    p = sub.add_parser("certify", help="certified rule region and safety case")
    p.add_argument("--population", required=True, help="population .npz (the evidence)")
    p.add_argument("--population-id", help="model / run id named in the case")
    p.add_argument("--context", action="append", required=True, help="w1,w2,w3:T (repeatable)")
    p.add_argument("--rules", nargs="+", default=["AON", "RE", "DV", "RP", "PP"])
    p.add_argument("--budget-collapse", type=inputs.rate, default=0.05)
    p.add_argument("--budget-exploitation", type=inputs.rate, default=0.05)
    p.add_argument("--level", type=inputs.level, default=0.95, help="confidence of the exact CIs")
    p.add_argument("--min-episodes", type=int, default=1)
    p.add_argument("--prompt", default="named clause, competitive goal")
    p.add_argument("--name", default="deployment")
    p.add_argument("--out", required=True, help="path without suffix: writes .md and .json")
    p.set_defaults(func=_cmd_certify)
