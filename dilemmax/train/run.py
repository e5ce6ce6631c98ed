"""Training runs on disk: a run folder, chunked training, checkpoints, metrics, curves, resume.

A run folder holds (the names are :mod:`dilemmax.agents.checkpoint`'s, read by trained policies
too)::

    config.json          the TrainConfig (what `--resume` and `dilemmax evaluate` rebuild from)
    metrics.jsonl        one record per chunk of `log_every` updates (training stats, periodic
                         evaluation with the env's own metrics)
    checkpoints/         ckpt_<chunk>.msgpack, the newest `keep_checkpoints`
    curve.png            learning curves drawn from metrics.jsonl
    eval.json            written by `dilemmax evaluate`

Training runs chunk by chunk: one compiled program of ``log_every`` updates (vmapped over
seeds, sharded over devices) is called repeatedly; after a chunk its metrics are appended and,
every ``checkpoint_every`` chunks and at the end, the runner state is saved. A crash loses at
most the chunks since the last checkpoint; ``--resume`` restores it and drops the metric records
written after it, which the resumed run recomputes identically.

The folder is safe against the usual accidents: training holds an exclusive lock on it
(``.lock``, an OS file lock that dies with its process, so a killed run leaves no stale lock),
so a second training into the same folder is refused; checkpoints carry a checksum and a damaged
newest one is named and skipped for the previous good one; a partial last line of metrics.jsonl
(a crash mid-write) is dropped; ``--resume`` needs the folder's config.json. When a loss or a
parameter stops being finite, training stops with :class:`TrainingDiverged` before saving that
state, so the last checkpoint is the last good one.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from dilemmax.agents import checkpoint
from dilemmax.agents.checkpoint import CONFIG_FILE, CURVE_FILE, METRICS_FILE, find_checkpoint
from dilemmax.runlock import LOCK_FILE, RunFolderError, RunLock  # noqa: F401 (re-exported)
from dilemmax.train.config import TrainConfig
from dilemmax.train.envs import check_env_config, check_fits
from dilemmax.train.ppo import RunnerState, Trainer
from dilemmax.train.sharding import data_mesh, place, runner_shardings

_DISPLAY_FIELDS = ("progress",)


class TrainingDiverged(RuntimeError):
    """A loss or parameter became NaN or infinite; the last good checkpoint is kept."""


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


def _all_finite(tree) -> jax.Array:
    leaves = [
        jnp.all(jnp.isfinite(x))
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


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


class TrainingRun:
    """One run folder and the compiled programs that train and evaluate in it."""

    def __init__(self, config: TrainConfig, out_dir: str | Path, env=None, check_memory=True):
        """``check_memory``: refuse (:class:`MemoryNeeded`) a run whose rollout buffer and env
        batch cannot fit this machine's memory, before anything compiles (off for evaluation,
        which allocates neither buffer)."""
        self.config = config
        self.dir = Path(out_dir)
        self.trainer = Trainer(config, env=env)
        check_env_config(self.trainer.env, config.env_config)
        self.mesh = data_mesh(config.shard, config.num_envs)
        self._chunk_fn = None
        self._eval_fn = None
        self._init_fn = None
        self._finite_fn = jax.jit(_all_finite)
        if check_memory:
            check_fits(config, self.trainer, self.seed_keys(), self.mesh)

    # ------------------------------------------------------------------ programs
    def seed_keys(self) -> jax.Array:
        base = jax.random.PRNGKey(self.config.seed)
        return jax.random.split(base, self.config.num_seeds)

    def _init(self) -> RunnerState:
        """The fresh runner state of every seed (its program compiled once per run object)."""
        if self._init_fn is None:
            self._init_fn = jax.jit(jax.vmap(self.trainer.init))
        return self._init_fn(self.seed_keys())

    def init_state(self) -> RunnerState:
        return place(self._init(), self.mesh)

    def chunk(self, state: RunnerState):
        if self._chunk_fn is None:
            fn = jax.vmap(self.trainer.chunk)
            if self.mesh is None:
                self._chunk_fn = jax.jit(fn)
            else:
                shardings = runner_shardings(state, self.mesh)
                self._chunk_fn = jax.jit(fn, out_shardings=(shardings, None))
        return self._chunk_fn(state)

    def evaluate(self, state: RunnerState, key: jax.Array, greedy: bool = False) -> dict:
        """The env's metrics on the evaluation configurations, averaged over seeds and episodes."""
        if self._eval_fn is None:
            fn = lambda p, c, k: self.trainer.evaluate(p, c, k, greedy)
            self._eval_fn = jax.jit(jax.vmap(fn))
        keys = jax.random.split(key, self.config.num_seeds)
        metrics = self._eval_fn(state.params, state.env_config, keys)
        lead = 3 if self.config.eval_grid else 2
        return summarize(metrics, lead)

    def template(self) -> RunnerState:
        """A fresh runner state: the structure, dtypes and shapes a checkpoint restores into."""
        return self._init()

    # ------------------------------------------------------------------ files
    def write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / CONFIG_FILE).write_text(self.config.to_json() + "\n")

    def records(self) -> list[dict]:
        return read_records(self.dir / METRICS_FILE, warn=lambda _: None)

    def _truncate_records(self, chunk: int) -> None:
        """Keeps the metric records of chunks before ``chunk`` (those a checkpoint covers); an
        unreadable line (a partial write) is named and dropped. Rewritten atomically."""
        path = self.dir / METRICS_FILE
        kept = [r for r in read_records(path) if r["chunk"] < chunk]
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, path)

    def _append(self, record: dict) -> None:
        with (self.dir / METRICS_FILE).open("a") as f:
            f.write(json.dumps(record) + "\n")

    # ------------------------------------------------------------------ the loop
    def restore_latest(self) -> tuple[RunnerState, int] | None:
        """The newest good checkpoint (damaged newer ones named and skipped) and the chunk to
        continue from; None without checkpoints."""
        found = checkpoint.restore_latest_good(self.dir, self.template())
        if found is None:
            return None
        state, meta, path = found
        self._check_progress(meta, path)
        return place(state, self.mesh), meta["chunk"] + 1

    def _check_progress(self, meta: dict, path: Path) -> None:
        """Refuses a checkpoint that config.json, edited since, no longer describes: one past
        the run's total_timesteps (resuming would train nothing and say "done") or cut into
        chunks of another log_every (resuming would count its updates wrongly)."""
        c, chunks, updates = self.config, meta["chunk"] + 1, meta["update"]
        where = f"cannot resume {self.dir}: {path.name} already trained {updates} updates"
        if updates != chunks * c.log_every:
            raise RunFolderError(
                f"{where} in {chunks} chunks of {updates // max(chunks, 1)}, but config.json "
                f"has log_every={c.log_every}; put back the log_every the run was trained with"
            )
        if updates > c.num_updates:
            steps = updates * c.num_envs * c.num_steps
            raise RunFolderError(
                f"{where} ({steps} env steps), but config.json has total_timesteps="
                f"{c.total_timesteps} ({c.num_updates} updates); raise total_timesteps to at "
                f"least {steps} or start a fresh run"
            )

    def warm_start(self, state: RunnerState, source: str | Path) -> RunnerState:
        """``state`` with the parameters of another run's newest checkpoint (a run folder) or of
        a checkpoint file, and a fresh optimiser state for them.

        The source's network must have this run's shapes (same env observation and actions,
        same network options); a source with one seed seeds every seed of this run. Raises
        :class:`RunFolderError` naming what does not match.
        """
        path = Path(source)
        try:
            ckpt, _ = find_checkpoint(path)
            raw = checkpoint.read_raw(ckpt)
        except (FileNotFoundError, OSError, checkpoint.CheckpointError) as err:
            reason = f"no usable checkpoint ({err})"
            raise RunFolderError(f"init_from={str(source)!r}: {reason}") from None
        loaded = raw["runner_state"]["params"]
        ours = jax.tree_util.tree_flatten_with_path(state.params)[0]
        theirs = dict(jax.tree_util.tree_flatten_with_path(loaded)[0])
        seeds = self.config.num_seeds
        leaves = []
        for where, mine in ours:
            name = jax.tree_util.keystr(where)
            other = theirs.get(where)
            if other is None:
                raise RunFolderError(f"init_from={str(source)!r}: it has no parameter {name}")
            other = np.asarray(other)
            if other.shape[1:] != mine.shape[1:] or other.shape[0] not in (1, seeds):
                raise RunFolderError(
                    f"init_from={str(source)!r}: parameter {name} has shape {other.shape}, this "
                    f"run's is {tuple(mine.shape)} (seeds first): the networks differ"
                )
            leaves.append(jnp.broadcast_to(jnp.asarray(other, mine.dtype), mine.shape))
        if len(theirs) != len(ours):
            raise RunFolderError(f"init_from={str(source)!r}: its network has other parameters")
        params = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(state.params), leaves)
        opt_state = jax.jit(jax.vmap(self.trainer.tx.init))(params)
        return place(state.replace(params=params, opt_state=opt_state), self.mesh)

    def check_resumable(self) -> None:
        """Refuses to resume a folder without config.json, or whose config is another one."""
        path = self.dir / CONFIG_FILE
        if not path.exists():
            raise RunFolderError(f"cannot resume {self.dir}: it has no {CONFIG_FILE}")
        try:
            saved = json.loads(path.read_text())
        except (ValueError, OSError) as err:
            reason = f"unreadable {CONFIG_FILE} ({err})"
            raise RunFolderError(f"cannot resume {self.dir}: {reason}") from None
        current = json.loads(self.config.to_json())
        # Display-only fields may differ between the run and its resumption.
        same = lambda d: {k: v for k, v in d.items() if k not in _DISPLAY_FIELDS}
        if not isinstance(saved, dict) or same(saved) != same(current):
            raise RunFolderError(
                f"cannot resume {self.dir}: its {CONFIG_FILE} is not this run's configuration"
            )

    def train(self, resume: bool = False, max_chunks: int | None = None) -> RunnerState:
        """Trains to ``config.num_chunks`` chunks (or ``max_chunks`` more, to test crashes),
        holding the folder's lock throughout (:class:`RunFolderError` if another run holds it)."""
        with RunLock(self.dir, "training"):
            return self._train(resume, max_chunks)

    def _train(self, resume: bool, max_chunks: int | None) -> RunnerState:
        c = self.config
        start = 0
        if resume:
            self.check_resumable()
        restored = self.restore_latest() if resume else None
        if restored is None:
            if resume:
                print(f"no checkpoint in {self.dir}: starting afresh")
            elif (self.dir / CONFIG_FILE).exists():
                # Checked again under the lock: a run that finished between the command's own
                # check and this lock must not have its config and metrics overwritten.
                raise RunFolderError(
                    f"{self.dir} already holds a run: continue it with --resume or choose "
                    "another --out"
                )
            self.write_config()
            (self.dir / METRICS_FILE).write_text("")
            state = self.init_state()
            if c.init_from:
                state = self.warm_start(state, c.init_from)
        else:
            state, start = restored
            self._truncate_records(start)
        stop = c.num_chunks if max_chunks is None else min(c.num_chunks, start + max_chunks)

        logger = WandbLogger(c, self.dir) if c.wandb else None
        bar = _progress(c, start, stop)
        steps_per_chunk = c.num_envs * c.num_steps * c.log_every
        eval_key = jax.random.PRNGKey(c.seed + 1_000_003)
        try:
            for chunk in range(start, stop):
                t0 = time.perf_counter()
                state, metrics = self.chunk(state)
                metrics = jax.block_until_ready(metrics)
                seconds = time.perf_counter() - t0
                self._stop_if_diverged(state, metrics, chunk)
                record = {
                    "chunk": chunk,
                    "update": (chunk + 1) * c.log_every,
                    "env_steps": (chunk + 1) * steps_per_chunk,
                    "seconds": seconds,
                    "env_steps_per_s": steps_per_chunk * c.num_seeds / seconds,
                    **summarize(metrics, 1),
                }
                last = chunk == c.num_chunks - 1
                if c.eval_every > 0 and ((chunk + 1) % c.eval_every == 0 or last):
                    key = jax.random.fold_in(eval_key, chunk)
                    record.update({f"eval/{k}": v for k, v in self.evaluate(state, key).items()})
                self._append(record)
                if logger is not None:
                    logger.log(record)
                if (chunk + 1) % c.checkpoint_every == 0 or last or chunk == stop - 1:
                    checkpoint.save(self.dir, state, chunk, record["update"], c.keep_checkpoints)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(_postfix(record))
        finally:
            if bar is not None:
                bar.close()
            if logger is not None:
                logger.finish()
        plot_curves(self.dir)
        return state

    def _stop_if_diverged(self, state: RunnerState, metrics: dict, chunk: int) -> None:
        """Raises :class:`TrainingDiverged` (before anything of this chunk is saved) when a loss
        or a parameter is NaN or infinite."""
        bad = non_finite_losses(metrics)
        if not bool(self._finite_fn(state.params)):
            bad.append("parameters")
        if bad:
            last = checkpoint.latest_checkpoint(self.dir)
            kept = f"last good checkpoint kept: {last}" if last else "no checkpoint was written"
            raise TrainingDiverged(
                f"training diverged in chunk {chunk} (updates up to "
                f"{(chunk + 1) * self.config.log_every}): non-finite {', '.join(bad)}; {kept}. "
                "Try a smaller lr or max_grad_norm"
            )


def _progress(config: TrainConfig, start: int, stop: int):
    if not config.progress:
        return None
    return tqdm(
        total=config.num_chunks,
        initial=start,
        desc=f"{config.algo} {config.env}",
        unit="chunk",
        dynamic_ncols=True,
    )


def _postfix(record: dict) -> dict:
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


def load_run(path: str | Path) -> tuple[TrainingRun, RunnerState, Path]:
    """(run, restored state, checkpoint) from a run folder (its newest good checkpoint) or a
    checkpoint file inside one.

    Raises :class:`RunFolderError` for a folder without config.json or checkpoints, and
    :class:`~dilemmax.agents.checkpoint.CheckpointError` for a damaged checkpoint file.
    """
    path = Path(path)
    if path.is_file():
        ckpt, run_dir = path, path.parent.parent
    elif path.is_dir():
        run_dir, ckpt = path, None
    else:
        raise RunFolderError(f"{path} is neither a run folder nor a checkpoint file")
    config_path = run_dir / CONFIG_FILE
    if not config_path.exists():
        raise RunFolderError(f"{run_dir} has no {CONFIG_FILE}: not a run folder")
    try:
        values = json.loads(config_path.read_text())
    except ValueError as err:
        raise RunFolderError(f"{config_path} is not valid JSON ({err})") from None
    config = TrainConfig.from_dict(values)
    config.validate()
    run = TrainingRun(config, run_dir, check_memory=False)
    if ckpt is not None:
        state, _ = checkpoint.restore(ckpt, run.template())
        return run, state, ckpt
    found = checkpoint.restore_latest_good(run_dir, run.template())
    if found is None:
        raise RunFolderError(f"no checkpoint in {run_dir}")
    state, _, ckpt = found
    return run, state, ckpt
