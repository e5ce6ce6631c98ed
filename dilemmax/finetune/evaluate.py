"""Base model vs fine-tuned adapters: game outcomes on the 15-condition grid, and RLOO reward.

- :func:`evaluate_methods` plays every method (the base model, each adapter) in every seat of
  the paper's 15 one-at-a-time conditions through the language-model play harness
  (:class:`dilemmax.llm.play.BatchedPlay`, :class:`dilemmax.llm.hf_client.TransformersClient`);
  :func:`evaluate_seats` does the same for any model seat (``openai:``, ``inspect:``, ``hf:``
  specs, built by :func:`dilemmax.llm.seats.build_seat`); both summarise the outcomes with
  bootstrap confidence intervals (:func:`dilemmax.llm.results.summarize`), over the whole grid
  and per condition.
- :func:`table3` writes the paper's Table 3 form (change in team success per method, in
  percentage points, against the base model) beside all six outcomes; :func:`plot_methods`
  draws it.
- :func:`reward_on_records` samples one reply per held-out prompt and scores it with the RLOO
  reward (:mod:`dilemmax.finetune.rewards`): the quantity RLOO optimises.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from dilemmax.commandline import headless_pyplot
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import condition_grid
from dilemmax.finetune.common import load_model
from dilemmax.finetune.generation import EVALUATE_GENERATE, RLOO_GENERATE
from dilemmax.finetune.rewards import reply_rewards
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.hf_client import TransformersClient
from dilemmax.llm.play import BatchedPlay, Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.results import summarize
from dilemmax.statistics import standard_error

# The six outcomes the paper reports (never team success alone), then two more.
OUTCOMES = (
    "team_success",
    "query_rate",
    "info_transfer",
    "local_reward",
    "unsafe_choice",
    "format_validity",
    "final_accuracy",
    "score",
)
Summary = dict[str, dict[str, tuple[float, float, float]]]


# ----------------------------------------------------------------------------- game play
def play_method(
    model: str,
    adapter: str | None,
    name: str,
    num_episodes: int,
    seed: int = 0,
    protocol_options: Mapping[str, Any] | None = None,
    generate: GenerateConfig = EVALUATE_GENERATE,
    num_envs: int = 16,
    batch_size: int = 16,
    mapping: str = "highest",
    progress: bool = True,
    grid: Mapping[int, Any] | None = None,
) -> Summary:
    """:func:`play_seat` with the local transformers model (and adapter) ``model`` in every
    seat, on the GPU when there is one, sampled as ``generate`` says (its max_tokens and
    temperature; the run's ``seed``)."""
    import torch  # optional llm extra

    device = "cuda" if torch.cuda.is_available() else "cpu"
    client = TransformersClient(
        model,
        adapter,
        replace(generate, seed=seed),
        batch_size=batch_size,
        device=device,
    )
    seat = Seat(name, LLMPolicy(client, name=name))
    options = {"protocol_options": protocol_options, "num_envs": num_envs, "mapping": mapping}
    return play_seat(seat, num_episodes, seed=seed, progress=progress, grid=grid, **options)


def play_seat(
    seat: Seat,
    num_episodes: int,
    seed: int = 0,
    protocol_options: Mapping[str, Any] | None = None,
    num_envs: int = 16,
    mapping: str = "highest",
    progress: bool = True,
    grid: Mapping[int, Any] | None = None,
) -> Summary:
    """Plays ``num_episodes`` episodes of each of the 15 conditions (or of ``grid``, a
    ``{n: ConditionSet}`` such as a dataset's :func:`~dilemmax.finetune.datasets.sft_grid`) with
    ``seat`` (any policy: a model seat of :func:`dilemmax.llm.seats.build_seat`) in every seat;
    its own protocol options lie over ``protocol_options``. Returns {"all" | condition name ->
    outcome -> (mean, low, high)}."""
    name = seat.name
    options = {**dict(protocol_options or {}), **dict(seat.protocol_options)}
    key = jax.random.key(seed)
    parts, names_of = [], {}
    grid = condition_grid(mapping) if grid is None else grid
    total = sum(len(s) for s in grid.values()) * num_episodes
    bar = tqdm(total=total, desc=f"play {name}", disable=not progress)
    for (n, conditions), part_key in zip(
        grid.items(), jax.random.split(key, len(grid)), strict=True
    ):
        env = MoralHazardEnv(n)
        protocol = env.text_protocol(**options)
        play = BatchedPlay(env, [seat] * n, protocol, num_envs=num_envs, progress=bar)
        result = play.run(part_key, num_episodes, conditions.configs, part=f"n={n}")
        parts.append((result.metrics, result.episodes))
        for info in result.episodes:
            names_of[info["id"]] = conditions.names[info["config_index"]]
    bar.close()
    axes = MoralHazardEnv.metric_axes
    overall = summarize(parts, axes, key=jax.random.fold_in(key, 1))["all"]
    per_condition = summarize(
        parts, axes, group_of=lambda info: names_of[info["id"]], key=jax.random.fold_in(key, 2)
    )
    return {"all": overall, **per_condition}


def evaluate_methods(
    model: str, methods: Mapping[str, str | None], **options
) -> dict[str, Summary]:
    """{method name -> :func:`play_method` summary}; ``methods`` maps a name to an adapter
    folder (None for the base model)."""
    return {name: play_method(model, adapter, name, **options) for name, adapter in methods.items()}


def evaluate_seats(seats: Mapping[str, Seat], **options) -> dict[str, Summary]:
    """{method name -> :func:`play_seat` summary} for seats built from model seat specs
    (``openai:``, ``inspect:``, ``hf:``); ``options`` as :func:`play_seat` takes them."""
    return {name: play_seat(replace(seat, name=name), **options) for name, seat in seats.items()}


# ------------------------------------------------------------------------------- reports
def _cell(estimate, scale=100.0, digits=1) -> str:
    mean, low, high = (scale * x for x in estimate)
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def table3(results: Mapping[str, Summary], base: str = "base") -> str:
    """Markdown: per method, the change in team success against ``base`` (percentage points,
    the paper's Table 3) and every outcome over the grid, mean [95% CI] in percent."""
    outcomes = [o for o in OUTCOMES if o != "score"]
    header = "| method | change in team success (pp) | " + " | ".join(outcomes) + " | score |"
    lines = [header, "| --- " * (len(outcomes) + 3) + "|"]
    base_team = results[base]["all"]["team_success"][0] if base in results else float("nan")
    for name, summary in results.items():
        overall = summary["all"]
        change = 100.0 * (overall["team_success"][0] - base_team)
        cells = [_cell(overall[o]) for o in outcomes]
        score = _cell(overall["score"], scale=1.0, digits=3)
        lines.append(f"| {name} | {change:+.1f} | " + " | ".join(cells) + f" | {score} |")
    return "\n".join(lines)


def condition_table(summary: Summary) -> str:
    """Markdown: one row per condition, every outcome as mean [95% CI] in percent."""
    outcomes = [o for o in OUTCOMES if o != "score"]
    lines = ["| condition | " + " | ".join(outcomes) + " |", "| --- " * (len(outcomes) + 1) + "|"]
    for condition, row in summary.items():
        if condition != "all":
            lines.append(f"| {condition} | " + " | ".join(_cell(row[o]) for o in outcomes) + " |")
    return "\n".join(lines)


def plot_methods(results: Mapping[str, Summary], path: str | Path) -> Path:
    """Bar chart: each outcome (percent, with its CI) per method."""
    plt = headless_pyplot()

    outcomes = [o for o in OUTCOMES if o not in ("score", "final_accuracy")]
    methods = list(results)
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(10, 4))
    x = np.arange(len(outcomes))
    for j, name in enumerate(methods):
        est = np.array([results[name]["all"][o] for o in outcomes]) * 100.0
        err = np.abs(est[:, 1:].T - est[:, 0])
        ax.bar(x + j * width, est[:, 0], width, yerr=err, capsize=3, label=name)
    ax.set_xticks(x + width * (len(methods) - 1) / 2, [o.replace("_", " ") for o in outcomes])
    ax.set_ylabel("percent of episodes / opportunities")
    ax.set_ylim(0, 105)
    ax.set_title("moral_hazard, 15-condition grid: base vs fine-tuned (95% bootstrap CI)")
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(
    results: Mapping[str, Summary], out_dir: str | Path, base: str = "base"
) -> dict[str, Path]:
    """results.json, table3.md (with per-condition tables; changes against ``base``) and
    outcomes.png under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    sections = ["## Team success change and outcomes over the grid", "", table3(results, base)]
    for name, summary in results.items():
        sections += ["", f"## {name}: per condition", "", condition_table(summary)]
    (out / "table3.md").write_text("\n".join(sections) + "\n")
    return {
        "json": out / "results.json",
        "table": out / "table3.md",
        "plot": plot_methods(results, out / "outcomes.png"),
    }


# ------------------------------------------------------------------------- RLOO reward
def generate_replies(
    model,
    tokenizer,
    records: Sequence[Mapping[str, Any]],
    generate: GenerateConfig = RLOO_GENERATE,
    batch_size: int = 8,
    seed: int = 0,
) -> list[str]:
    """One sampled reply per record's prompt, ``generate``'s max_tokens long at most, at its
    temperature (greedy when 0) and top_p (None: no cut)."""
    import torch  # optional llm extra

    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    replies = []
    model.eval()
    for start in range(0, len(records), batch_size):
        batch = records[start : start + batch_size]
        texts = [
            tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
            for r in batch
        ]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = enc.to(device)
        sampling = generate.temperature > 0
        options = {"do_sample": sampling, "max_new_tokens": generate.max_tokens}
        if sampling:
            top_p = 1.0 if generate.top_p is None else generate.top_p
            options.update(temperature=generate.temperature, top_p=top_p, top_k=0)
        with torch.no_grad():
            out = model.generate(**enc, pad_token_id=tokenizer.pad_token_id, **options)
        new = out[:, enc["input_ids"].shape[1] :]
        replies += tokenizer.batch_decode(new, skip_special_tokens=True)
    return replies


def reward_on_records(
    model_path: str,
    adapter: str | None,
    records: Sequence[Mapping[str, Any]],
    samples: int = 1,
    **options,
) -> dict[str, Any]:
    """Mean RLOO reward (and each part) of ``samples`` sampled replies per record, with the
    standard error of the mean reward and the mean per stage (see :func:`reward_summary`)."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    model, tokenizer = load_model(model_path, adapter, trainable=False)
    repeated = [r for r in records for _ in range(samples)]  # one prompt's samples side by side
    replies = generate_replies(model, tokenizer, repeated, **options)
    return reward_summary(repeated, replies, samples)


def reward_summary(
    records: Sequence[Mapping[str, Any]], replies: Sequence[str], samples: int = 1
) -> dict[str, Any]:
    """Means of each reward part over ``replies``, plus ``reward_se`` (the standard error of the
    mean reward across prompts: each prompt's ``samples`` consecutive replies are averaged first,
    so the samples of one prompt are not counted as independent), ``prompts``, ``samples`` and
    ``per_stage`` (mean reward per decision stage) and ``per_prompt`` (each prompt's mean, for
    :func:`paired_difference`)."""
    parts = reply_rewards(records, replies)
    means = {name: float(np.mean(values)) for name, values in parts.items()}
    per_prompt = np.asarray(parts["reward"], dtype=float).reshape(-1, samples).mean(axis=1)
    stages = [str(r.get("stage", "")) for r in records]
    per_stage = {
        stage: float(
            np.mean([x for x, s in zip(parts["reward"], stages, strict=True) if s == stage])
        )
        for stage in dict.fromkeys(stages)
    }
    return {
        **means,
        "reward_se": standard_error(per_prompt),
        "prompts": len(per_prompt),
        "samples": samples,
        "per_stage": per_stage,
        "per_prompt": [round(float(x), 6) for x in per_prompt],
    }


def paired_difference(after: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, float]:
    """Mean reward of ``after`` minus ``before`` over the same prompts, with the standard error of
    the per-prompt differences (pairing removes how hard each prompt is from the noise).

    Both are :func:`reward_summary` outputs on the same records in the same order; ValueError
    names the mismatch otherwise.
    """
    a = np.asarray(after.get("per_prompt", []), dtype=float)
    b = np.asarray(before.get("per_prompt", []), dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("both results need per-prompt rewards ('per_prompt')")
    if a.shape != b.shape:
        raise ValueError(f"the results cover {a.size} and {b.size} prompts; compare equal sets")
    diff = a - b
    return {
        "difference": float(diff.mean()),
        "difference_se": standard_error(diff),
        "prompts": int(diff.size),
    }
