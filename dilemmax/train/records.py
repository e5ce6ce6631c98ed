"""What a run writes beside its checkpoints: metric records, curves, progress, wandb.

Only process 0 of a multi-process run calls these (see :mod:`dilemmax.train.distributed`).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from dilemmax.agents.checkpoint import CONFIG_FILE, CURVE_FILE, METRICS_FILE
from dilemmax.train.config import TrainConfig


def read_records(path: Path, warn=print) -> list[dict]:
    """The JSON records of a metrics.jsonl; a line that does not parse (a partial last line
    from a crash mid-write, a damaged line) is dropped with a warning."""
    if not path.exists():
        return []
    out = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            warn(f"{path}: dropping unreadable line {number} (partial write?)")
            continue
        if isinstance(record, dict) and isinstance(record.get("chunk"), int):
            out.append(record)
        else:
            warn(f"{path}: dropping line {number} (not a metrics record)")
    return out


def non_finite_losses(metrics: dict) -> list[str]:
    """Names of the ``loss/*`` metrics of a chunk with a NaN or infinite entry."""
    return sorted(
        name
        for name, value in metrics.items()
        if name.startswith("loss/") and not np.all(np.isfinite(np.asarray(value, np.float64)))
    )


def _to_json(value: Any) -> Any:
    value = np.asarray(value)
    if value.size == 1:
        v = float(value.reshape(()))
        return v if math.isfinite(v) else None
    return [_to_json(v) for v in value]


def summarize(metrics: dict, lead_axes: int) -> dict:
    """Means over the first ``lead_axes`` axes (seeds, configurations, episodes), NaN-aware."""
    out = {}
    for name, value in metrics.items():
        value = np.asarray(value, np.float64)
        axes = tuple(range(min(lead_axes, value.ndim)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out[name] = _to_json(np.nanmean(value, axis=axes) if axes else value)
    return out


def progress_bar(config: TrainConfig, start: int, stop: int):
    """A tqdm bar over the run's chunks from ``start`` (None when ``config.progress`` is off)."""
    if not config.progress:
        return None
    return tqdm(
        total=config.num_chunks,
        initial=start,
        desc=f"{config.algo} {config.env}",
        unit="chunk",
        dynamic_ncols=True,
    )


def progress_postfix(record: dict) -> dict:
    """The few numbers of a chunk's record the progress bar shows."""
    out = {}
    for key in ("return/learners", "loss/entropy", "env_steps_per_s"):
        if isinstance(record.get(key), float):
            out[key.split("/")[-1]] = f"{record[key]:.3g}"
    return out


class WandbLogger:
    """Optional Weights & Biases logging (the ``wandb`` extra); offline mode needs no network."""

    def __init__(self, config: TrainConfig, run_dir: Path):
        try:
            import wandb  # the optional wandb extra: imported only when a run logs to it
        except ImportError as err:
            raise SystemExit(
                "wandb=true needs the wandb package: pip install 'dilemmax[wandb]'"
            ) from err
        self._wandb = wandb
        self.run = wandb.init(
            project=config.wandb_project,
            config=config.to_dict(),
            dir=str(run_dir),
            mode=config.wandb_mode,
            name=run_dir.name,
            resume="allow",
        )

    def log(self, record: dict) -> None:
        flat = {}
        for key, value in record.items():
            if isinstance(value, list):
                flat.update({f"{key}/{i}": v for i, v in enumerate(value) if v is not None})
            elif value is not None:
                flat[key] = value
        self._wandb.log(flat, step=int(record["env_steps"]))

    def finish(self) -> None:
        self.run.finish()


def plot_curves(run_dir: str | Path, out: str | Path | None = None) -> Path | None:
    """Draws return, entropy and the scalar evaluation metrics against env steps."""
    run_dir = Path(run_dir)
    path = run_dir / METRICS_FILE
    if not path.exists():
        return None
    records = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    if not records:
        return None
    steps = [r["env_steps"] for r in records]
    eval_keys = sorted(
        {k for r in records for k, v in r.items() if k.startswith("eval/") and isinstance(v, float)}
    )
    # Metrics that moved during training first: they are the informative curves.
    spread = lambda k: len({r[k] for r in records if isinstance(r.get(k), float)}) > 1
    eval_keys.sort(key=lambda k: not spread(k))
    panels = [("return/learners", "training return (learners)"), ("loss/entropy", "entropy")]
    panels += [(k, k) for k in eval_keys[:6]]
    cols = 2
    rows = -(-len(panels) // cols)
    # The object-oriented API draws off-screen, whatever backend pyplot would pick.
    fig = Figure(figsize=(10, 3 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        xs = [s for s, r in zip(steps, records, strict=True) if isinstance(r.get(key), float)]
        ys = [r[key] for r in records if isinstance(r.get(key), float)]
        ax.plot(xs, ys, marker="." if len(xs) < 30 else None)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    config = (
        json.loads((run_dir / CONFIG_FILE).read_text()) if (run_dir / CONFIG_FILE).exists() else {}
    )
    fig.suptitle(f"{config.get('algo', '')} on {config.get('env', '')}")
    fig.tight_layout()
    out = Path(out) if out else run_dir / CURVE_FILE
    fig.savefig(out, dpi=100)
    return out
