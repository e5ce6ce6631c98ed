"""Training runs on disk: a run folder, chunked training, checkpoints, metrics, curves, resume.

A run folder holds (the names are :mod:`dilemmax.agents.checkpoint`'s, read by trained policies
too)::

    config.json          the TrainConfig (what `--resume` and `dilemmax evaluate` rebuild from)
    metrics.jsonl        one record per chunk of `log_every` updates (training stats, periodic
                         evaluation with the env's own metrics)
    checkpoints/         ckpt_<chunk>.msgpack or ckpt_<chunk>/ (orbax), the newest
                         `keep_checkpoints`
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

On several processes (:mod:`dilemmax.train.distributed`) every process runs this same loop on the
global arrays; process 0 alone holds the lock and writes config, metrics, curves and wandb, and
checkpoints are orbax folders that every process writes its shards into (asynchronously: the next
chunk trains while the last one is written). ``checkpointer`` picks the format: "auto" (msgpack
on one process, orbax on several), "msgpack" or "orbax"; a folder may hold both, and a resume
reads whichever is newest, on any number of processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from dilemmax.agents import checkpoint
from dilemmax.agents.checkpoint import CONFIG_FILE, METRICS_FILE
from dilemmax.runlock import RunFolderError, RunLock
from dilemmax.train.config import TrainConfig
from dilemmax.train.distributed import agree, describe, is_primary
from dilemmax.train.envs import check_env_config, check_fits
from dilemmax.train.ppo import RunnerState, Trainer
from dilemmax.train.records import (
    WandbLogger,
    non_finite_losses,
    plot_curves,
    progress_bar,
    progress_postfix,
    read_records,
    summarize,
)
from dilemmax.train.sharding import data_mesh, place, runner_shardings
from dilemmax.train.warm_start import warm_start_params
from dilemmax.train.watchdog import StallWatchdog

_DISPLAY_FIELDS = ("progress", "stall_timeout")
# Fields added after runs were saved: a config.json without one ran with its default.
_ADDED_FIELDS = {"checkpointer": "auto", "env_version": 0, "stall_timeout": 600.0}


class TrainingDiverged(RuntimeError):
    """A loss or parameter became NaN or infinite; the last good checkpoint is kept."""


def _all_finite(tree) -> jax.Array:
    leaves = [
        jnp.all(jnp.isfinite(x))
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def _silent(_: str) -> None:
    """Where the processes other than process 0 send their messages (each is said once)."""


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
        self.primary = is_primary()
        self.say = print if self.primary else _silent
        self.orbax = config.checkpointer == "orbax" or (
            config.checkpointer == "auto" and jax.process_count() > 1
        )
        if jax.process_count() > 1 and not self.orbax:
            raise ValueError(
                f"checkpointer={config.checkpointer}: a run on {jax.process_count()} processes "
                "writes orbax checkpoints (each process its own shards); use auto or orbax"
            )
        self._chunk_fn = None
        self._eval_fn = None
        self._init_fn = None
        self._sharded_init_fn = None
        self._writer = None  # the async orbax checkpointer, made at the first save
        self._finite_fn = jax.jit(_all_finite, out_shardings=self._replicated())
        if check_memory:
            check_fits(config, self.trainer, self.seed_keys(), self.mesh)

    # ------------------------------------------------------------------ programs
    def seed_keys(self) -> jax.Array:
        base = jax.random.PRNGKey(self.config.seed)
        return jax.random.split(base, self.config.num_seeds)

    def _replicated(self) -> NamedSharding | None:
        return None if self.mesh is None else NamedSharding(self.mesh, PartitionSpec())

    def _init_seeds(self, keys: jax.Array) -> RunnerState:
        """The fresh runner state of each seed, stacked: the seeds one after another, not
        vmapped, so that no initialiser becomes a batched QR factorisation. jaxlib 0.10's CPU
        runtime deadlocks when several batched LAPACK calls run at once on its thread pool,
        which the devices of a sharded init do whatever XLA's scheduler (benchmarks/xla_stall/)."""
        return jax.lax.map(self.trainer.init, keys)

    def _init(self) -> RunnerState:
        """The fresh runner state of every seed (its program compiled once per run object)."""
        if self._init_fn is None:
            self._init_fn = jax.jit(self._init_seeds)
        return self._init_fn(self.seed_keys())

    def abstract_state(self) -> RunnerState:
        """The runner state's shapes and dtypes (``jax.ShapeDtypeStruct`` leaves, nothing run)."""
        return jax.eval_shape(jax.vmap(self.trainer.init), self.seed_keys())

    def shardings(self) -> RunnerState | None:
        """Where each leaf of the runner state lives (None without a mesh)."""
        return None if self.mesh is None else runner_shardings(self.abstract_state(), self.mesh)

    def init_state(self) -> RunnerState:
        if self.mesh is None:
            return self._init()
        # Every process runs the init program over the global mesh and keeps its own shards:
        # the seeds' keys are host values, the same on every process.
        if self._sharded_init_fn is None:
            init = self._init_seeds
            self._sharded_init_fn = jax.jit(init, out_shardings=self.shardings())
        return self._sharded_init_fn(jax.device_get(self.seed_keys()))

    def chunk(self, state: RunnerState):
        if self._chunk_fn is None:
            fn = jax.vmap(self.trainer.chunk)
            if self.mesh is None:
                self._chunk_fn = jax.jit(fn)
            else:
                shardings = runner_shardings(state, self.mesh)
                self._chunk_fn = jax.jit(fn, out_shardings=(shardings, self._replicated()))
        return self._chunk_fn(state)

    def evaluate(self, state: RunnerState, key: jax.Array, greedy: bool = False) -> dict:
        """The env's metrics on the evaluation configurations, averaged over seeds and episodes."""
        if self._eval_fn is None:
            fn = lambda p, c, k: self.trainer.evaluate(p, c, k, greedy, self.mesh)
            self._eval_fn = jax.jit(jax.vmap(fn), out_shardings=self._replicated())
        keys = jax.random.split(key, self.config.num_seeds)
        if self.mesh is not None:
            keys = jax.device_get(keys)
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

    # ------------------------------------------------------------------ checkpoints
    def restore(self, path: str | Path) -> tuple[RunnerState, dict]:
        """(state on this run's devices, metadata) of one checkpoint of either format."""
        state, meta = checkpoint.restore(path, self.abstract_state(), self.shardings())
        return place(state, self.mesh), meta

    def restore_latest(self) -> tuple[RunnerState, int] | None:
        """The newest good checkpoint (damaged newer ones named and skipped) and the chunk to
        continue from; None without checkpoints. Every process restores the same one."""
        found = checkpoint.restore_latest_good(
            self.dir,
            self.abstract_state(),
            warn=self.say,
            shardings=self.shardings(),
            agree=agree if jax.process_count() > 1 else None,
        )
        if found is None:
            return None
        state, meta, path = found
        self._check_progress(meta, path)
        return place(state, self.mesh), meta["chunk"] + 1

    def save(self, state: RunnerState, chunk: int, update: int) -> None:
        """Checkpoint ``chunk``: a msgpack file, or an orbax folder written in the background
        while the next chunk trains (the previous one is finished first)."""
        if not self.orbax:
            if self.primary:
                checkpoint.save(self.dir, state, chunk, update, self.config.keep_checkpoints)
            return
        if self._writer is None:
            self._writer = checkpoint.orbax_checkpointer(asynchronous=True)
        self.finish_saving()
        checkpoint.save_orbax(self.dir, state, chunk, update, self._writer)

    def finish_saving(self) -> None:
        """Waits for a checkpoint still being written, then keeps the newest ones."""
        if self._writer is not None:
            self._writer.wait_until_finished()
            if self.primary:
                checkpoint.prune(self.dir, self.config.keep_checkpoints)

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
        params = warm_start_params(state.params, source, self.config.num_seeds)
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
        if isinstance(saved, dict):
            # (only keys this run has: an unregistered env's config records no env_version)
            added = {k: v for k, v in _ADDED_FIELDS.items() if k not in saved and k in current}
            saved = {**added, **saved}
        if not isinstance(saved, dict) or same(saved) != same(current):
            raise RunFolderError(
                f"cannot resume {self.dir}: its {CONFIG_FILE} is not this run's configuration"
            )

    def train(self, resume: bool = False, max_chunks: int | None = None) -> RunnerState:
        """Trains to ``config.num_chunks`` chunks (or ``max_chunks`` more, to test crashes),
        holding the folder's lock throughout (:class:`RunFolderError` if another run holds it;
        on several processes, process 0 holds it for all)."""
        lock, error = None, None
        if self.primary:
            try:
                lock = RunLock(self.dir, "training").acquire()
            except RunFolderError as err:
                error = err
        if not agree(error is None):
            raise error or RunFolderError(f"{self.dir}: process 0 could not lock the run folder")
        try:
            return self._train(resume, max_chunks)
        finally:
            if lock is not None:
                lock.release()

    def _start(self, resume: bool) -> tuple[RunnerState, int]:
        """The state and chunk training starts from: the newest good checkpoint on resume, else
        a fresh state (config.json and an empty metrics.jsonl written first)."""
        c = self.config
        if resume:
            self.check_resumable()
        restored = self.restore_latest() if resume else None
        if restored is not None:
            state, start = restored
            if self.primary:
                self._truncate_records(start)
            return state, start
        if resume:
            self.say(f"no checkpoint in {self.dir}: starting afresh")
        # Checked again under the lock: a run that finished between the command's own check and
        # this lock must not have its config and metrics overwritten.
        taken = self.primary and not resume and (self.dir / CONFIG_FILE).exists()
        if not agree(not taken):
            raise RunFolderError(
                f"{self.dir} already holds a run: continue it with --resume or choose another --out"
            )
        if self.primary:
            self.write_config()
            (self.dir / METRICS_FILE).write_text("")
        state = self.init_state()
        if c.init_from:
            state = self.warm_start(state, c.init_from)
        return state, 0

    def _train(self, resume: bool, max_chunks: int | None) -> RunnerState:
        c = self.config
        state, start = self._start(resume)
        stop = c.num_chunks if max_chunks is None else min(c.num_chunks, start + max_chunks)

        logger = WandbLogger(c, self.dir) if c.wandb and self.primary else None
        bar = progress_bar(c, start, stop) if self.primary else None
        steps_per_chunk = c.num_envs * c.num_steps * c.log_every
        eval_key = jax.random.PRNGKey(c.seed + 1_000_003)
        watchdog = StallWatchdog(c.stall_timeout, self._stall_message).start()
        try:
            for chunk in range(start, stop):
                t0 = time.perf_counter()
                with watchdog.waiting(f"chunk {chunk}"):
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
                if self.primary:
                    self._append(record)
                if logger is not None:
                    logger.log(record)
                if (chunk + 1) % c.checkpoint_every == 0 or last or chunk == stop - 1:
                    self.save(state, chunk, record["update"])
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(progress_postfix(record))
        finally:
            watchdog.stop()
            with contextlib.suppress(Exception):  # a failed save is named by the error above
                self.finish_saving()
            if bar is not None:
                bar.close()
            if logger is not None:
                logger.finish()
        if self.primary:
            plot_curves(self.dir)
        return state

    def _stall_message(self, what: str) -> str:
        """The line the watchdog prints when ``what`` (a chunk) waited ``stall_timeout`` seconds
        with the process idle: what happened, and what ``--resume`` continues from."""
        last = checkpoint.latest_checkpoint(self.dir)
        kept = (
            f"the last checkpoint, {last.name}, is on disk: run the same command with --resume "
            "to continue from it"
            if last
            else "no checkpoint was written yet: the same command with --resume starts it again"
        )
        who = f" ({describe()})" if jax.process_count() > 1 else ""
        return (
            f"dilemmax train: {what} made no progress for {self.config.stall_timeout:g} s with "
            f"the process idle{who} (a stalled computation or a collective waiting for a peer; "
            f"docs/distributed.md), so the run ends here; {kept} (--set stall_timeout=SECONDS "
            "sets the wait, 0 waits forever)"
        )

    def _stop_if_diverged(self, state: RunnerState, metrics: dict, chunk: int) -> None:
        """Raises :class:`TrainingDiverged` (before anything of this chunk is saved) when a loss
        or a parameter is NaN or infinite (on every process alike)."""
        bad = non_finite_losses(metrics)
        if not bool(self._finite_fn(state.params)):
            bad.append("parameters")
        if not agree(not bad):
            self.finish_saving()
            last = checkpoint.latest_checkpoint(self.dir)
            kept = f"last good checkpoint kept: {last}" if last else "no checkpoint was written"
            raise TrainingDiverged(
                f"training diverged in chunk {chunk} (updates up to "
                f"{(chunk + 1) * self.config.log_every}): non-finite "
                f"{', '.join(bad) or 'values on another process'}; {kept}. "
                "Try a smaller lr or max_grad_norm"
            )


def load_run(path: str | Path) -> tuple[TrainingRun, RunnerState, Path]:
    """(run, restored state, checkpoint) from a run folder (its newest good checkpoint), a
    checkpoint file or an orbax checkpoint folder inside one.

    Raises :class:`RunFolderError` for a folder without config.json or checkpoints, and
    :class:`~dilemmax.agents.checkpoint.CheckpointError` for a damaged checkpoint.
    """
    path = Path(path)
    if path.is_file() or checkpoint.is_orbax(path):
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
    config = TrainConfig.from_dict(values, str(run_dir))
    config.validate()
    run = TrainingRun(config, run_dir, check_memory=False)
    if ckpt is not None:
        state, _ = run.restore(ckpt)
        return run, state, ckpt
    found = checkpoint.restore_latest_good(run_dir, run.abstract_state(), shardings=run.shardings())
    if found is None:
        raise RunFolderError(f"no checkpoint in {run_dir}")
    state, _, ckpt = found
    return run, place(state, run.mesh), ckpt
