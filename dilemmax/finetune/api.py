"""``dilemmax finetune evaluate``, ``reward`` and ``gepa`` from Python: :func:`evaluate`,
:func:`reward` and :func:`gepa`.

    from dilemmax.finetune.api import evaluate
    from dilemmax.llm.config import GenerateConfig

    result = evaluate(
        "runs/eval", methods={"mine": "openai:my-model"}, episodes=5,
        generate=GenerateConfig(base_url="http://localhost:8000/v1", max_tokens=64),
    )
    result.results["mine"]["all"]["team_success"]    # (mean, low, high)
    print(result.table())                             # the paper's Table 3 form

The commands are these functions' command lines: the same arguments from their flags, the same
episodes, summaries and files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dilemmax.commandline import user_input
from dilemmax.envs.memory import check_waves_fit
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import condition_grid
from dilemmax.envs.seat_spec import is_model_seat
from dilemmax.envs.typecheck import typed_arguments
from dilemmax.errors import UsageError
from dilemmax.finetune.checks import (
    RLOO_FIELDS,
    check_adapter,
    check_model,
    read_records,
    read_spec,
)
from dilemmax.finetune.command_checks import (
    check_output_folder,
    check_run,
    protocol_options,
    set_threads,
)
from dilemmax.finetune.datasets import sft_grid
from dilemmax.finetune.evaluate import (
    Summary,
    evaluate_methods,
    evaluate_seats,
    paired_difference,
    reward_on_records,
    table3,
    write_report,
)
from dilemmax.finetune.generation import EVALUATE_GENERATE, RLOO_GENERATE
from dilemmax.finetune.gepa import GEPASettings, optimize_prompts
from dilemmax.finetune.processes import refuse_launch
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.seats import build_seat, check_specs, model_kinds


# --------------------------------------------------------------------------- evaluate
@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate` played.

    Attributes:
        results: method -> {"all" | condition name -> outcome -> (mean, low, high)}.
        base: the method the changes in team success are taken against.
        files: the report's files (``json``, ``table``, ``plot``).
    """

    results: dict[str, Summary]
    base: str
    files: dict[str, Path] = field(default_factory=dict)

    def table(self) -> str:
        """The paper's Table 3 form: change in team success against :attr:`base`, and every
        outcome."""
        return table3(self.results, self.base)


@typed_arguments
def evaluate(
    out: str | Path,
    *,
    model: str | None = None,
    adapters: Mapping[str, str] | None = None,
    methods: Mapping[str, str] | None = None,
    episodes: int = 5,
    seed: int = 0,
    protocol: Mapping[str, Any] | None = None,
    conditions: str | Path | None = None,
    envs: int = 16,
    batch: int = 16,
    generate: GenerateConfig | None = None,
    threads: int = 0,
    progress: bool = False,
) -> Evaluation:
    """Plays each method in every seat of the moral-hazard condition grid and writes the report
    (results.json, table3.md, the plot) to the folder ``out``.

    Args:
        model: a local transformers model, played as ``base`` and with each of ``adapters``
            (name -> adapter folder).
        methods: name -> model seat spec (``openai:<model>[,base_url=...]``,
            ``inspect:<provider>/<model>``, ``hf:<folder>[,adapter=...]``).
        episodes: episodes per condition.
        protocol: text-protocol options over the paper's SFT variant (or, with
            ``conditions``, over the dataset's).
        conditions: a dataset folder whose condition grid is played instead of the paper's 15.
        envs: environments stepped together; batch: prompts per generate call (local model).
        generate: how models are asked (default
            :data:`~dilemmax.finetune.generation.EVALUATE_GENERATE`: 128 tokens, greedy); the
            local model reads its max_tokens and temperature.
        threads: torch CPU threads (0: torch's own).
    """
    refuse_launch("evaluate")
    set_threads(threads)
    generate = (generate or EVALUATE_GENERATE).check()
    local = _local_methods(model, adapters)
    specs = _method_specs(methods, local, generate)
    if not local and not specs:
        raise UsageError("give --model (with any --adapter) or --method NAME=<model seat spec>")
    grid = None
    if conditions is not None:
        spec = read_spec(str(conditions), "--conditions")
        with user_input(f"--conditions {conditions}"):
            grid = sft_grid(spec)
    played_protocol = protocol_options(protocol, str(conditions) if conditions else None)
    grid_played = condition_grid() if grid is None else grid  # each method plays them in turn
    total = sum(len(s) for s in grid_played.values()) * episodes
    what = "finetune evaluate"
    check_waves_fit(MoralHazardEnv(2), envs, total, what, "--envs or --episodes")
    check_output_folder(str(out), "--out")
    options = {
        "num_episodes": episodes,
        "seed": seed,
        "protocol_options": played_protocol,
        "num_envs": envs,
        "progress": progress,
        "grid": grid,
    }
    results = evaluate_methods(
        model, local, generate=generate, batch_size=batch, **options,
    ) if local else {}  # fmt: skip
    cache: dict = {}
    seats = {
        name: build_seat(spec, MoralHazardEnv(2), generate, cache=cache)
        for name, spec in specs.items()
    }
    results.update(evaluate_seats(seats, **options))
    base = "base" if "base" in results else next(iter(results))
    files = write_report(results, out, base)
    return Evaluation(results, base, dict(files))


def _local_methods(model: str | None, adapters: Mapping[str, str] | None) -> dict[str, str | None]:
    """The base model and each adapter (none without a model), every folder checked before the
    first is played."""
    if not model:
        if adapters:
            raise UsageError("--adapter needs --model (the base model it adapts)")
        return {}
    methods: dict[str, str | None] = {"base": None, **dict(adapters or {})}
    check_model(model, local=True)  # played through the local transformers client
    for name, folder in methods.items():
        check_adapter(folder, f"--adapter ({name})")
    return methods


def _method_specs(methods, taken, generate: GenerateConfig) -> dict[str, str]:
    """name -> model seat spec, every spec checked by the seat parser (kind, options and
    ranges, folders, API keys) before anything is played."""
    specs: dict[str, str] = {}
    for name, spec in (methods or {}).items():
        entry = f"{name}={spec}"
        if not name or not spec:
            raise UsageError(f"--method expects NAME=<kind>:<target>, got {entry!r}")
        if name in taken:
            raise UsageError(f"--method {entry!r}: the name {name!r} is given twice")
        if not is_model_seat(spec):
            kinds = ", ".join(f"{k}:" for k in model_kinds())
            raise UsageError(f"--method {entry!r}: evaluate plays model seats ({kinds})")
        specs[name] = spec
    check_specs(MoralHazardEnv(2), specs, None, generate)
    return specs


# --------------------------------------------------------------------------- reward
@typed_arguments
def reward(
    model: str,
    data: str | Path,
    *,
    adapter: str | None = None,
    split: str = "heldout",
    max_records: int = 0,
    samples: int = 1,
    generate: GenerateConfig | None = None,
    batch: int = 8,
    seed: int = 0,
    threads: int = 0,
    baseline: Mapping[str, Any] | None = None,
    baseline_name: str = "baseline",
) -> dict[str, Any]:
    """The mean RLOO reward (and its standard error, each part, per stage and per prompt) of
    ``samples`` sampled replies per record of the dataset split, sampled as ``generate`` says
    (default :data:`~dilemmax.finetune.generation.RLOO_GENERATE`, RLOO's own sampling: its
    max_tokens, temperature and top_p); ``max_records`` > 0 scores an evenly spaced sample.
    With ``baseline`` (an earlier result on the same records, named ``baseline_name``), adds the
    paired difference (this minus it) as ``vs_baseline``."""
    refuse_launch("reward")
    set_threads(threads)
    generate = (generate or RLOO_GENERATE).check()
    records = read_records(str(data), split, RLOO_FIELDS)
    check_run(model, adapter)
    if max_records and len(records) > max_records:  # evenly spaced over the grid
        picks = np.linspace(0, len(records) - 1, max_records).round().astype(int)
        records = [records[i] for i in picks]
    if baseline is not None:
        check_baseline(baseline, baseline_name, split, len(records))
    means = reward_on_records(
        model, adapter, records, generate=generate, seed=seed, batch_size=batch,
        samples=samples,
    )  # fmt: skip
    row = {
        "model": model,
        "adapter": adapter,
        "split": split,
        "records": len(records),
        "temperature": generate.temperature,
        **means,
    }
    if baseline is not None:
        row["vs_baseline"] = {"baseline": baseline_name, **paired_difference(row, baseline)}
    return row


def check_baseline(baseline: Mapping[str, Any], name: str, split: str, count: int) -> None:
    """Raises UsageError unless the baseline result scored the records this run will score
    (checked before the model is loaded, not after the scoring)."""
    if baseline.get("split") != split or baseline.get("records") != count:
        scored = f"{baseline.get('records')} {baseline.get('split')}"
        raise UsageError(
            f"--baseline {name} scored {scored} records; this run scores {count} {split} records"
        )
    per_prompt = baseline.get("per_prompt")
    if not (
        isinstance(per_prompt, list)
        and len(per_prompt) == count
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in per_prompt)
    ):
        raise UsageError(
            f"--baseline {name}: 'per_prompt' must list {count} rewards, one per record "
            "(a --json result of `dilemmax finetune reward`)"
        )


# --------------------------------------------------------------------------- gepa
@typed_arguments
def gepa(settings: GEPASettings) -> dict[str, Any]:
    """GEPA prompt optimisation against R_game (the ``gepa`` extra), every folder checked
    before any model loads; returns :func:`~dilemmax.finetune.gepa.optimize_prompts`' result."""
    refuse_launch("gepa")
    settings.generate.check()
    check_model(settings.model, local=True)  # played through the local transformers client
    check_run(settings.model, settings.adapter, settings.out)
    if settings.reflection_model:
        check_model(settings.reflection_model, "--reflection-model", local=True)
    return optimize_prompts(settings)
