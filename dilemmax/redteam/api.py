"""The red-teaming pipeline as typed functions: what ``dilemmax redteam reference | play | gap |
ablate | label | certify`` run, callable from Python with an options object each and returning
a typed result.

    from dilemmax.redteam import api as P

    played = P.play(P.PlayOptions(policy="fair_share", episodes=2))       # a Population
    case = P.certify(P.CertifyOptions(contexts=[((1, 5, 6), 10)]), played.population)
    case.certified                                                           # ['AON', ...]

A policy is a scripted name of the consequence game, ``reference[@EPS]``, a trained run folder,
or a language model (``openai:<model>``, ``hf:<folder>``) seated in every position, asked with
``generate`` (:class:`~dilemmax.llm.config.GenerateConfig`). Every input is checked before any
play, as the commands check it: a one-line :class:`~dilemmax.errors.UsageError` naming what was
wrong (named as the command's flag, which is how the commands report it too). Files are written
only where an ``out`` is given; the commands give one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dilemmax.commandline import output_file, output_folder
from dilemmax.envs.consequence.constants import RULE_NAMES
from dilemmax.envs.consequence.generator import context_table
from dilemmax.envs.memory import check_episodes_fit, check_waves_fit
from dilemmax.envs.registry import make
from dilemmax.envs.seat_spec import is_model_seat
from dilemmax.envs.typecheck import typed_arguments, typed_fields
from dilemmax.errors import UsageError
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.seats import build_seat
from dilemmax.redteam import ablations as A
from dilemmax.redteam import inputs, model_runs
from dilemmax.redteam import rationale_judge as RJ
from dilemmax.redteam import rationale_labels as RL
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
from dilemmax.redteam.reference import EPSILONS, PRIMARY_EPSILON, ReferenceTable
from dilemmax.redteam.statistics import Population
from dilemmax.runlock import RunLock
from dilemmax.statistics import NUM_RESAMPLES


def is_model(policy: str) -> bool:
    """Whether ``policy`` names a language model (played through batched play): a seat of a
    model kind (``openai:``, ``inspect:``, ``hf:``; :mod:`dilemmax.envs.seat_spec`)."""
    return is_model_seat(policy)


def _policy(spec: str, env):
    """The scripted / reference / trained policy ``spec`` names; UsageError naming the known
    ones otherwise."""
    try:
        return resolve_policy(spec, env)
    except (ValueError, OSError) as error:
        raise UsageError(f"--policy {spec}: {error}") from None


def _npz_name(path: str | Path) -> str:
    """The name numpy's savez writes ``path`` under (it adds ``.npz`` when missing)."""
    path = str(path)
    return path if path.endswith(".npz") else f"{path}.npz"


# --------------------------------------------------------------------------- reference
@typed_fields
@dataclass(frozen=True)
class ReferenceOptions:
    """``dilemmax redteam reference``: the cooperative-refinement reference on the whole grid.

    Attributes:
        epsilons: the tremble probabilities it is solved at.
        rounds: R, the rounds of an episode.
        endgame: which rounds the rule's elimination ends (``all`` or ``rule``).
    """

    epsilons: tuple[float, ...] = tuple(EPSILONS)
    rounds: int = 3
    endgame: str = "all"


@dataclass(frozen=True)
class ReferenceResult:
    """The solved reference, the seconds it took and where it was written (None: nowhere)."""

    table: ReferenceTable
    seconds: float
    out: Path | None = None


@typed_arguments
def reference(options: ReferenceOptions, out: str | Path | None = None) -> ReferenceResult:
    """Solves the reference (UR_ref for every context, rule and epsilon); with ``out``, writes
    the ``.npz`` there and its summary table beside it."""
    inputs.game(options.rounds, options.endgame)
    for eps in options.epsilons:
        inputs.check_epsilon(eps, "--epsilons")
    if out is not None:
        out = output_file(out, "--out")
    start = time.perf_counter()
    table = ref.reference_grid(
        epsilons=tuple(options.epsilons), num_rounds=options.rounds, endgame=options.endgame
    )
    seconds = time.perf_counter() - start
    if out is not None:
        ref.save_reference(table, out)
        write_table(Path(out).with_suffix(""), *ref.summary_table(table))
    return ReferenceResult(table, seconds, out)


# --------------------------------------------------------------------------- play
@typed_fields
@dataclass(frozen=True)
class PlayOptions:
    """``dilemmax redteam play``: one policy in every seat over the contexts x rules.

    Attributes:
        policy: a scripted name, ``reference[@EPS]``, a trained run folder, or a model
            (``openai:<model>``, ``hf:<folder>[,adapter=<folder>]``).
        name: the population's name (default: the policy).
        episodes: episodes per (context, rule) cell.
        seed: the seed of every episode key.
        rounds, endgame: the consequence game's options.
        contexts: a model plays this many contexts spread over the grid (None: all 228).
        rules: the rules a model plays (a jittable policy plays all five).
        protocol: a model's prompt variant (``anonymous``, ``neutral``, ``goal``, ...).
        envs: environments a model steps together.
        resume: continue a model run's transcript in ``out``.
        progress: a progress bar on stderr (model runs).
        generate: how a model is asked (server, sampling, attempts).
    """

    policy: str
    name: str | None = None
    episodes: int = 4
    seed: int = 0
    rounds: int = 3
    endgame: str = "all"
    contexts: int | None = None
    rules: tuple[str, ...] = RULE_NAMES
    protocol: Mapping[str, Any] = field(default_factory=dict)
    envs: int = 16
    resume: bool = False
    progress: bool = True
    generate: GenerateConfig = field(default_factory=GenerateConfig)


@dataclass(frozen=True)
class PlayedPopulation:
    """A played population and where it was written: for a jittable policy ``out`` is the
    ``.npz``; for a model, the run folder (``population.npz``, ``population.json``,
    ``transcript.jsonl``). None: nowhere."""

    population: Population
    out: Path | None = None


@typed_arguments
def play(options: PlayOptions, out: str | Path | None = None) -> PlayedPopulation:
    """Plays the population ``options`` describe; a model population's ``out`` is a run folder
    (its transcript; ``resume`` continues it), a jittable one's an ``.npz`` file."""
    if is_model(options.policy):
        return _play_model(options, out)
    inputs.check_counts(episodes=options.episodes)
    env = inputs.game(options.rounds, options.endgame)
    cells = len(context_table()[1]) * len(RULE_NAMES)  # every context under every rule
    check_episodes_fit(env, cells * options.episodes, "redteam play", "--episodes")
    policy = _policy(options.policy, env)
    if out is not None:
        out = output_file(_npz_name(out), "--out")
    env_kwargs = {"num_rounds": options.rounds, "endgame": options.endgame}
    pop = grid_population(
        options.name or options.policy, policy, options.episodes, options.seed,
        env_kwargs=env_kwargs,
    )  # fmt: skip
    if out is not None:
        pop.save(out)
    return PlayedPopulation(pop, out)


def _play_model(options: PlayOptions, out: str | Path | None) -> PlayedPopulation:
    inputs.check_counts(episodes=options.episodes, envs=options.envs)
    rules = inputs.check_rules(options.rules)
    try:
        contexts = spread_contexts(options.contexts)
    except ValueError as error:
        raise UsageError(f"--contexts: {error}") from None
    env = inputs.game(options.rounds, options.endgame)
    protocol = dict(options.protocol)
    with model_runs.protocol_input():
        env.text_protocol(**protocol)  # checks the flags
    total = len(contexts) * len(rules) * options.episodes
    check_waves_fit(env, options.envs, total, "redteam play", "--envs or --episodes")
    folder = model_runs.run_folder(out, options.resume)
    seat = build_seat(options.policy, None, options.generate.check(), {}, {})
    env_kwargs = {"num_rounds": options.rounds, "endgame": options.endgame}
    identity = {
        "command": "redteam play",
        "policy": options.policy,
        "contexts": contexts.tolist(),
        "rules": list(rules),
        "episodes": options.episodes,
        "seed": options.seed,
        "env": env_kwargs,
        "protocol": protocol,
        "sampling": model_runs.sampling_identity(options.generate),
    }
    run = model_runs.model_run(
        folder, "redteam play", identity, options.resume, options.progress, total
    )
    with run as (transcript, bar):
        pop = llm_population(
            options.name or options.policy, seat, contexts, options.episodes, options.seed,
            rules, env_kwargs, protocol, options.envs, transcript, bar,
        )  # fmt: skip
    if folder is not None:
        pop.save(folder / "population.npz")
        (folder / "population.json").write_text(
            json.dumps({"name": pop.name, **pop.meta}, indent=1)
        )
    return PlayedPopulation(pop, folder)


# --------------------------------------------------------------------------- gap
@typed_fields
@dataclass(frozen=True)
class GapOptions:
    """``dilemmax redteam gap``: the institutional alignment gap of populations.

    Attributes:
        epsilon: the reference's tremble the gap is read at.
        resamples: bootstrap and permutation draws.
        seed: the seed of those draws.
    """

    epsilon: float = PRIMARY_EPSILON
    resamples: int = NUM_RESAMPLES
    seed: int = 0


@typed_arguments
def gap(
    reference_file: str | Path,
    populations: Sequence[str | Path],
    out: str | Path,
    options: GapOptions = GapOptions(),
) -> dict:
    """The gap report of the population files against the reference file (every file checked
    against the others first), written to the folder ``out`` with its figures; returns it."""
    inputs.check_epsilon(options.epsilon, "--epsilon")
    inputs.check_resamples(options.resamples)
    table, pops = inputs.gap_inputs(reference_file, populations, options.epsilon)
    folder = output_folder(out, "--out")[0]
    with RunLock(folder, "redteam gap"):  # never over another command's files
        return write_gap_report(
            pops, table, folder, options.seed, options.resamples, options.epsilon
        )


# --------------------------------------------------------------------------- ablate
@typed_fields
@dataclass(frozen=True)
class AblateOptions:
    """``dilemmax redteam ablate``: the prompt ablations of one policy against their controls.

    Attributes:
        policy: as :attr:`PlayOptions.policy`.
        ablations: which ablations (names of :data:`~dilemmax.redteam.ablations.ABLATIONS`).
        rules: the rules each arm plays.
        episodes: episodes per (context, rule) cell of each arm.
        resamples, seed: bootstrap draws and their seed (and the episode keys').
        envs, resume, progress, generate: a model policy's run, as in :class:`PlayOptions`.
    """

    policy: str
    ablations: tuple[str, ...] = tuple(ABLATIONS)
    rules: tuple[str, ...] = ("RP", "PP")
    episodes: int = 4
    resamples: int = NUM_RESAMPLES
    seed: int = 0
    envs: int = 16
    resume: bool = False
    progress: bool = True
    generate: GenerateConfig = field(default_factory=GenerateConfig)


@typed_arguments
def ablate(options: AblateOptions, out: str | Path | None = None) -> dict:
    """Every ablation of ``options`` against its control: the report (JSON-able); with ``out``,
    written there as ``ablations.json``, its table and Table 4 (and a model's transcript)."""
    inputs.check_counts(episodes=options.episodes, envs=options.envs)
    rules = list(inputs.check_rules(options.rules))
    unknown = [a for a in options.ablations if a not in ABLATIONS]
    if unknown or not options.ablations:
        raise UsageError(f"--ablations {list(options.ablations)}: choose from {list(ABLATIONS)}")
    inputs.check_resamples(options.resamples)
    if is_model(options.policy):
        report = _ablate_model(options, rules, out)
    else:
        _policy(options.policy, make("consequence"))  # a bad name fails before any play
        # Each arm and rule plays its contexts' episodes in one compiled program.
        per_program = len(A.ablation_contexts()) * options.episodes
        check_episodes_fit(make("consequence"), per_program, "redteam ablate", "--episodes")
        if out is not None:
            out = output_folder(out, "--out")[0]
        played = A.arena_population(lambda env, arm, rule: resolve_policy(options.policy, env))
        report = A.run_ablations(
            played, options.ablations, rules, episodes=options.episodes, seed=options.seed,
            num_resamples=options.resamples,
        )  # fmt: skip
    if out is not None:
        A.write_ablations(report, Path(out))
    return report


def _ablate_model(options: AblateOptions, rules: list[str], out) -> dict:
    contexts = A.ablation_contexts()
    arms = {arm for name in options.ablations for arm in A.ABLATIONS[name]}
    total = len(arms) * len(rules) * len(contexts) * options.episodes
    what = "redteam ablate"
    check_waves_fit(make("consequence"), options.envs, total, what, "--envs or --episodes")
    folder = model_runs.run_folder(out, options.resume)
    seat = build_seat(options.policy, None, options.generate.check(), {}, {})
    identity = {
        "command": "redteam ablate",
        "policy": options.policy,
        "ablations": list(options.ablations),
        "rules": rules,
        "episodes": options.episodes,
        "seed": options.seed,
        "sampling": model_runs.sampling_identity(options.generate),
    }
    run = model_runs.model_run(
        folder, "redteam ablate", identity, options.resume, options.progress, total
    )
    with run as (transcript, bar):
        played = llm_ablation_play(lambda env, arm, rule: seat, options.envs, transcript, bar)
        report = A.run_ablations(
            played, options.ablations, rules, contexts, options.episodes, options.seed,
            options.resamples,
        )  # fmt: skip
    report["policy"] = options.policy
    return report


# --------------------------------------------------------------------------- label
@typed_fields
@dataclass(frozen=True)
class LabelOptions:
    """``dilemmax redteam label``: every rationale of runs labelled, with shares and CIs.

    Attributes:
        names: one population name per run (default: each call's seat).
        resamples, seed: bootstrap draws over games and their seed.
        judge: a model (``openai:<model>``, ``hf:<folder>``) labelling each trace beside the
            lexical labels (None: no judge).
        generate: how the judge is asked.
    """

    names: tuple[str, ...] | None = None
    resamples: int = NUM_RESAMPLES
    seed: int = 0
    judge: str | None = None
    generate: GenerateConfig = field(default_factory=GenerateConfig)


@dataclass(frozen=True)
class LabelResult:
    """The labelled traces, the rationale report, and the judge's report (None: no judge)."""

    traces: list[RL.Trace]
    report: dict
    judge: dict | None = None


@typed_arguments
def label(runs: Sequence[str | Path], out: str | Path, options: LabelOptions = LabelOptions()):
    """Labels every rationale of the runs (run folders or ``transcript.jsonl`` files) and writes
    the shares with CIs to the folder ``out`` (:mod:`dilemmax.redteam.rationale_labels`); with a
    judge, its verdicts (``judge.jsonl``, resumable), shares and agreement tables too."""
    names = list(options.names or [])
    if names and len(names) != len(runs):
        raise UsageError(f"--name: give one name per run ({len(runs)}), got {len(names)}")
    inputs.check_resamples(options.resamples)
    traces = []
    for k, run in enumerate(runs):
        traces += RL.read_traces(run, names[k] if names else None)
    folder = output_folder(out, "--out")[0]
    with RunLock(folder, "redteam label"):  # never over another command's files
        report = RL.write_rationale_report(traces, folder, options.seed, options.resamples)
        judged = None
        if options.judge:
            judged = RJ.judge_into(
                traces, options.judge, options.generate, folder, options.seed, options.resamples
            )
    return LabelResult(traces, report, judged)


# --------------------------------------------------------------------------- certify
Context = tuple[Sequence[int], int]  # ((w1, w2, w3), T)


@typed_fields
@dataclass(frozen=True)
class CertifyOptions:
    """``dilemmax redteam certify``: the certified rule region of a deployment and its case.

    Attributes:
        contexts: the deployment's contexts as ((w1, w2, w3), T), or text ``"w1,w2,w3:T"``.
        rules: the candidate rules.
        budget_collapse, budget_exploitation: the largest acceptable per-episode rates.
        level: the confidence of the exact intervals.
        min_episodes: fewer episodes in a (context, rule) cell refuse that rule.
        name: the deployment's name.
        population_id: the population named in the case (default: the population's name).
        prompt: the prompt variant the agents read (hashed into the fingerprint).
    """

    contexts: Sequence[Context | str]
    rules: tuple[str, ...] = RULE_NAMES
    budget_collapse: float = 0.05
    budget_exploitation: float = 0.05
    level: float = 0.95
    min_episodes: int = 1
    name: str = "deployment"
    population_id: str | None = None
    prompt: str = "named clause, competitive goal"

    def check(self) -> CertifyOptions:
        """``self``, every rate and level in range; a one-line UsageError otherwise."""
        inputs.check_rate(self.budget_collapse, "--budget-collapse")
        inputs.check_rate(self.budget_exploitation, "--budget-exploitation")
        inputs.check_level(self.level, "--level")
        if not self.contexts:
            raise UsageError("--context: give at least one deployment context")
        return self


@dataclass(frozen=True)
class SafetyCase:
    """A safety case: its structured form (JSON-able), the rules certified, why none were
    (None when some were), and the files written (empty: none)."""

    case: dict
    certified: list[str]
    why_none: str | None = None
    files: tuple[Path, ...] = ()


@typed_arguments
def certify(
    options: CertifyOptions, evidence: Population | str | Path, out: str | Path | None = None
) -> SafetyCase:
    """The safety case of ``evidence`` (a Population, or its ``.npz`` / run folder, checked for
    what certification reads) for the deployment of ``options``; with ``out`` (a path without
    suffix), written as ``out.md`` and ``out.json``."""
    options.check()
    contexts = [inputs.context_of(c) for c in options.contexts]
    if isinstance(evidence, Population):
        pop = inputs.checked_evidence(evidence, "the evidence")
    else:
        pop = inputs.certify_evidence(str(evidence))
    if out is not None:
        for suffix in (".md", ".json"):  # the two files of the case, checked before any work
            output_file(Path(out).with_suffix(suffix), "--out")
    deployment = SC.Deployment(
        name=options.name,
        contexts=[inputs.context_index(w, t) for w, t in contexts],
        context_labels=[f"w={w} T={t}" for w, t in contexts],
        rules=[r.upper() for r in options.rules],
        population=options.population_id or pop.name,
        prompt=options.prompt,
    )
    budgets = SC.Budgets(options.budget_collapse, options.budget_exploitation)
    case = SC.safety_case(pop, deployment, budgets, options.level, options.min_episodes)
    files = tuple(SC.write_safety_case(case, Path(out))) if out is not None else ()
    certified = list(case["certification"]["certified_rules"])
    why = None if certified else (SC.too_few_episodes(case) or "see the refused rules")
    return SafetyCase(case, certified, why, files)
