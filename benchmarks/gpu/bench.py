"""Every accelerator figure in one call: env throughput, the CPU-tuned paths' A/B, training
throughput and a time-boxed slice of the RL^2 curriculum, each part within its time share.

    python benchmarks/gpu/bench.py --out "$OUT"              # one H200: 9 minutes at most
    python benchmarks/gpu/bench.py --tiny --out /tmp/gpu-dry  # the same code paths, CPU, tiny

Parts (``--parts``), in this order, after ``meta`` (versions, devices, ``nvidia-smi``):

- ``env``: every game, ``vmap(env.step)`` / ``VecEnv`` / ``vmap(env.step_env)``, N growing until
  a size does not fit or the part's time is up (``run_all.measure``: compile apart, observations
  and rewards consumed, blocked on, the modes' calls alternating).
- ``ab``: each CPU-tuned path against plain JAX at the same N, the variants' timed calls
  alternating: ``fastrandom.HASH_BY_BACKEND`` (unrolled hash / without its barrier /
  ``jax.random``), ``rare.BRANCH_BY_BACKEND`` (skip / select, gather fractions), the grid games
  without gathered resets, and a 3x3 convolution's gradient as ``lax.conv`` vs patches + matmul
  (``conv_cpu.layer_gradient_ms``).
- ``train``: one training chunk (rollout + PPO epochs, ``common.time_chunk``) per algorithm and
  game at accelerator batch sizes: IPPO with the default torso (MLP; grid games: code embedding
  + MLP), IPPO with the CNN torso, MAPPO, recurrent PPO; with the env alone timed on the same
  envs and steps, so the share of a chunk spent in the env is ``train / env`` env-steps/s.
- ``rl2``: ``benchmarks/learning/rl2_accelerator.sh`` with its steps per stage sized to the time
  left; stages it does not reach, or a stage stopped mid-training, make it partial.

Each part runs in a child process (a compile that runs long cannot take the rest down) with a
deadline: it checks the clock before each size or configuration and stops itself, recording
what it skipped; past its deadline and a grace it is killed and recorded as timed out. Rows are
appended to ``rows.jsonl`` as they are measured, and ``results.json`` / ``results.md`` /
``env_throughput.png`` are rewritten after every part, so a kill loses nothing already measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# run_all and timing (benchmarks/), common and conv_cpu (benchmarks/learning/): one home each,
# importable in the child processes that measure (see child()).
MODULE_PATHS = [str(HERE.parent), str(HERE.parent / "learning"), str(ROOT)]

PARTS = ("env", "ab", "train", "rl2")
# Share of the time left that a part gets when it starts (the rest flows to later parts).
WEIGHTS = {"env": 0.32, "ab": 0.22, "train": 0.32, "rl2": 0.14}
META_SECONDS = 60.0
WRAP_UP = 10.0
GRID = ("open_cleanup", "open_harvest")
TARGETS = {  # issue #39, one H200
    ("env", "open_cleanup"): 14e6,
    ("env", "open_harvest"): 22e6,
    ("train", "short"): 1e6,
    ("train", "grid"): 3e5,
}

# Sizes of the full run and of the dry run (--tiny). Keys "grid" and "other" split the games.
FULL = {
    "budget": 510.0,
    # The targets' N first, then up from 256 until a size does not fit or time is up.
    "env_sizes": {
        "grid": (4096, 256, 16384, 65536, 262144),
        "other": (4096, 256, 65536, 262144, 1048576),
    },
    "env_steps": {"grid": 100, "other": 50},
    "repeats": 3,
    "ab_sizes": {"grid": (4096,), "other": (65536,)},
    "conv_layers": ((20480, 24, 16), (20480, 16, 32)),  # (batch = 4,096 envs x 5 agents, C, F)
    "train_envs": {"grid": 4096, "other": 16384},
    "train": {"log_every": 1, "repeats": 3},
    "torso": {"hidden": 128, "conv_features": [16, 32], "embed_dim": 8, "gru_hidden": 128},
    "games": None,  # every game in every part
    "env_modes": None,  # every mode for every game
    "ab_variants": None,  # every variant
    "rl2": {"GAMES": "open_harvest open_cleanup", "STAGES": "99", "EPISODES": "64", "SEEDS": "1"},
    "rl2_extra": "num_envs=1024 num_minibatches=8",
    "rl2_steps": (2_000_000, 200_000_000),
    "rl2_cap_s": None,  # the part's whole share
}
TINY = {
    "budget": 1200.0,  # tiny sizes end long before on an idle machine; a loaded one is slow
    # The training part's envs and steps (train_envs, num_steps x log_every), so its env-alone
    # program and the A/B's default variant are the env part's, read from the compile cache.
    "env_sizes": {"grid": (4,), "other": (8,)},
    "env_steps": {"grid": 4, "other": 4},
    "repeats": 1,
    "ab_sizes": {"grid": (4,), "other": (8,)},
    "conv_layers": ((32, 4, 4),),
    "train_envs": {"grid": 4, "other": 8},
    "train": {"log_every": 1, "repeats": 1, "num_steps": 4, "num_minibatches": 2},
    "torso": {"hidden": 8, "conv_features": [4], "embed_dim": 2, "gru_hidden": 8},
    "games": {
        "env": ("moral_hazard", "consequence"),
        "ab": ("moral_hazard",),
        "train": {"ippo_mlp": ("moral_hazard",)},
    },
    # Enough to pass through every code path once: VecEnv and step_env on one game, two A/B
    # variants (each a program of its own to compile), one training run.
    "env_modes": {"moral_hazard": ("vmap_step", "vecenv", "step_env")},
    "ab_variants": ("default (CPU-tuned)", "plain JAX (jax.random + select)"),
    "rl2": {"GAMES": "open_harvest", "STAGES": "1", "EPISODES": "1", "SEEDS": "1"},
    "rl2_extra": (
        "num_envs=2 num_steps=4 num_minibatches=1 log_every=1 hidden=8 gru_hidden=8 "
        "conv_features=[4] embed_dim=2 eval_every=0 env_kwargs.trial_steps=4"
    ),
    "rl2_steps": (8, 8),
    # A CPU compiles the recurrent CNN's training program for minutes: the dry run stops the
    # script after this many seconds, so it ends partial, through the same stop-and-collect path
    # (any longer would only wait: the script cannot finish a stage on a CPU in seconds).
    "rl2_cap_s": 3.0,
}


# ----------------------------------------------------------------------------- rows on disk
class Rows:
    """``rows.jsonl`` under the output folder: one JSON object per line, appended and flushed
    as each figure is measured (a killed process loses nothing written)."""

    def __init__(self, out: Path):
        self.path = out / "rows.jsonl"

    def emit(self, part: str, kind: str = "row", **row) -> None:
        row = {"part": part, "kind": kind, "time": time.strftime("%H:%M:%S"), **row}
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        print(json.dumps(row, default=str)[:300], flush=True)

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill
                continue
        return rows


class Clock:
    """A part's deadline (``time.time()`` seconds)."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.last = 0.0  # seconds the last item took (a guess for the next)

    def left(self) -> float:
        return self.deadline - time.time()

    def allows(self, factor: float = 1.0) -> bool:
        """Whether there is time left, and enough for ``factor`` times the last item."""
        return self.left() > max(self.last * factor, 0.0)


def skipped(rows: Rows, part: str, what: list, clock: Clock) -> None:
    rows.emit(part, "cut", skipped=what, seconds_left=round(clock.left(), 1))


def _error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:400]


def _out_of_memory(err: BaseException) -> bool:
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def games(plan: dict, part: str, algo: str | None = None) -> list[str]:
    import dilemmax

    every = [e for e in dilemmax.registered_envs() if e != "toy"]
    chosen = plan["games"]
    if chosen is None:
        return every
    chosen = chosen.get(part, every)
    if algo is not None and isinstance(chosen, dict):
        chosen = chosen.get(algo, ())
    return [e for e in every if e in chosen]


def kind_of(env_id: str) -> str:
    return "grid" if env_id in GRID else "other"


# ----------------------------------------------------------------------------- meta
def part_meta(plan: dict, clock: Clock, rows: Rows, out: Path) -> None:
    import jax
    import jaxlib

    smi = _nvidia_smi()
    if smi is not None:
        (out / "nvidia-smi.txt").write_text(smi)
    devices = jax.devices()
    rows.emit(
        "meta",
        "meta",
        jax=jax.__version__,
        jaxlib=jaxlib.__version__,
        backend=jax.default_backend(),
        devices=[f"{d.platform}:{d.id} {d.device_kind}" for d in devices],
        device_memory=devices[0].memory_stats(),
        python=sys.version.split()[0],
        platform=platform.platform(),
        cpu_count=os.cpu_count(),
        load=os.getloadavg(),
        commit=_commit(),
        nvidia_smi=smi,
        environment={k: v for k, v in os.environ.items() if k.startswith(("XLA_", "JAX_"))},
    )


def _nvidia_smi() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
        query = subprocess.run(
            ["nvidia-smi", "-q", "-d", "CLOCK,MEMORY,POWER,PERFORMANCE"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout + done.stderr + "\n" + query.stdout
    except (OSError, subprocess.TimeoutExpired):
        return None


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return done.stdout.strip() or "unknown (no git metadata)"
    except OSError:
        return "unknown (no git)"


# ----------------------------------------------------------------------------- env
def part_env(plan: dict, clock: Clock, rows: Rows, out: Path) -> None:
    import run_all

    import dilemmax

    env_ids = games(plan, "env")
    for i, env_id in enumerate(env_ids):
        # Each game gets an equal share of what is left, so a slow one cannot starve the others.
        game_clock = Clock(time.time() + clock.left() / (len(env_ids) - i))
        env = dilemmax.make(env_id)
        sizes = list(plan["env_sizes"][kind_of(env_id)])
        steps = plan["env_steps"][kind_of(env_id)]
        for j, num_envs in enumerate(sizes):
            # A size of 4x the envs takes up to ~4x the last (compiles are about flat).
            if not game_clock.allows(factor=2.0 if j else 0.0):
                skipped(rows, "env", [f"{env_id} N={n}" for n in sizes[j:]], game_clock)
                break
            start = time.time()
            modes = list(run_all.MODES)
            if plan["env_modes"] is not None:
                modes = list(plan["env_modes"].get(env_id, ("vmap_step",)))
            try:
                measured = run_all.measure(
                    env, modes, num_envs, steps, plan["repeats"], parallel_compile=True
                )
            except Exception as err:  # noqa: BLE001  (recorded; the next game still runs)
                status = "does not fit" if _out_of_memory(err) else "failed"
                rows.emit(
                    "env",
                    "error",
                    env=env_id,
                    num_envs=num_envs,
                    status=status,
                    error=_error_text(err),
                )
                break
            for row in measured:
                rows.emit("env", env=env_id, **row)
            game_clock.last = time.time() - start


# ----------------------------------------------------------------------------- A/B
def variants(env_id: str) -> dict:
    """name -> (hash choice, branch policy, gathered_resets or None to keep the env's), the most
    telling first (a part cut short keeps those)."""
    from dilemmax.envs.rare import BranchPolicy

    out = {
        "default (CPU-tuned)": ("unrolled", BranchPolicy(), None),
        "plain JAX (jax.random + select)": ("jax", BranchPolicy(skip=False), None),
        "hash=jax.random": ("jax", BranchPolicy(), None),
        "reset=select (plain jnp.where)": ("unrolled", BranchPolicy(skip=False), None),
    }
    if env_id in GRID:
        out["gather=off (whole batch)"] = ("unrolled", BranchPolicy(), False)
        for fraction in (16, 4, 32, 2):
            out[f"gather=N/{fraction}"] = ("unrolled", BranchPolicy(gather_fraction=fraction), None)
    out["hash=unrolled, no barrier"] = ("unbarriered", BranchPolicy(), None)
    return out


def part_ab(plan: dict, clock: Clock, rows: Rows, out: Path) -> None:
    """Per game and N: every variant traced under its choices (in order, while the clock
    allows), all compiled side by side, then their timed calls alternating."""
    import jax
    import run_all

    import dilemmax
    from dilemmax.envs import fastrandom, rare

    env_ids = games(plan, "ab")
    for i, env_id in enumerate(env_ids):
        # The convolution A/B below keeps a tenth of the part.
        game_clock = Clock(time.time() + 0.9 * clock.left() / (len(env_ids) - i))
        steps = plan["env_steps"][kind_of(env_id)]
        for num_envs in plan["ab_sizes"][kind_of(env_id)]:
            if not game_clock.allows(factor=1.0):
                skipped(rows, "ab", [f"{env_id} N={num_envs}"], game_clock)
                continue
            start = time.time()
            chosen = variants(env_id)
            if plan["ab_variants"] is not None:
                chosen = {k: v for k, v in chosen.items() if k in plan["ab_variants"]}
            lowered = {}
            for name, (choice, policy, gathered) in chosen.items():
                env = dilemmax.make(env_id)
                if gathered is not None:
                    env.gathered_resets = gathered
                try:
                    with fastrandom.using_hash(choice), rare.using_branch(policy):
                        runner = run_all.make_runner(env, "vmap_step", num_envs, steps)
                        lowered[name] = runner.lower(jax.random.key(0))
                except Exception as err:  # noqa: BLE001
                    rows.emit(
                        "ab",
                        "error",
                        env=env_id,
                        num_envs=num_envs,
                        variant=name,
                        error=_error_text(err),
                    )
            try:
                programs, compile_s = run_all.compile_all(lowered, parallel=True)
                best, _ = run_all.time_round_robin(programs, max(plan["repeats"], 2))
            except Exception as err:  # noqa: BLE001
                rows.emit("ab", "error", env=env_id, num_envs=num_envs, error=_error_text(err))
                continue
            base = best.get("default (CPU-tuned)")
            for name, seconds in best.items():
                rows.emit(
                    "ab",
                    env=env_id,
                    num_envs=num_envs,
                    steps=steps,
                    variant=name,
                    env_steps_per_s=num_envs * steps / seconds,
                    vs_default=None if base is None else base / seconds,
                    compile_s=compile_s[name],
                    mode="vmap_step",
                )
            game_clock.last = time.time() - start
    _conv_ab(plan, clock, rows)


def _conv_ab(plan: dict, clock: Clock, rows: Rows) -> None:
    """One Conv3x3 layer's gradient inside a scan: lax.conv ("xla") against patches + matmul
    ("im2col"), the two alternating (xla, im2col, xla, im2col; the best of each counts)."""
    import conv_cpu

    for batch, channels, features in plan["conv_layers"]:
        best = {}
        for impl in ("xla", "im2col", "xla", "im2col"):
            if not clock.allows():
                skipped(rows, "ab", [f"conv B={batch} C={channels} F={features} {impl}"], clock)
                return
            start = time.time()
            try:
                ms = conv_cpu.layer_gradient_ms(impl, batch, channels, features, unroll=False)
            except Exception as err:  # noqa: BLE001
                rows.emit("ab", "error", variant=f"conv {impl}", error=_error_text(err))
                return
            best[impl] = min(best.get(impl, float("inf")), ms)
            clock.last = time.time() - start
        rows.emit(
            "ab",
            env="(network)",
            variant="conv3x3 gradient",
            batch=batch,
            channels=channels,
            features=features,
            xla_ms=best["xla"],
            im2col_ms=best["im2col"],
            xla_vs_im2col=best["im2col"] / best["xla"],
        )


# ----------------------------------------------------------------------------- training
TRAIN_RUNS = ("ippo_mlp", "ippo_cnn", "mappo", "rppo", "ippo_cnn_im2col")


def train_overrides(plan: dict, run: str, env_id: str) -> dict | None:
    """The training config overrides of ``run`` on ``env_id`` (None: not for this game)."""
    grid = env_id in GRID
    torso = plan["torso"]
    cnn = {k: torso[k] for k in ("hidden", "conv_features", "embed_dim")}
    base = {
        "num_envs": plan["train_envs"][kind_of(env_id)],
        "progress": False,
        "eval_every": 0,
        "log_every": plan["train"]["log_every"],
    }
    base.update({k: v for k, v in plan["train"].items() if k in ("num_steps", "num_minibatches")})
    if plan is TINY:
        base["hidden"] = torso["hidden"]
    if run == "ippo_mlp":
        return {"algo": "ippo", **base}
    if run == "mappo":
        return {"algo": "mappo", **base}
    if run == "rppo":
        recurrent = {"recurrent": True, "gru_hidden": torso["gru_hidden"]}
        return {"algo": "ippo", **base, **recurrent, **(cnn if grid else {})}
    if not grid:
        return None
    if run == "ippo_cnn":
        return {"algo": "ippo", **base, **cnn, "conv_impl": "auto"}
    return {"algo": "ippo", **base, **cnn, "conv_impl": "im2col"}


def part_train(plan: dict, clock: Clock, rows: Rows, out: Path) -> None:
    import common

    from dilemmax.train.configure import make_config

    env_only: dict = {}
    todo = [
        (run, env_id)
        for run in TRAIN_RUNS
        for env_id in games(plan, "train", run)
        if train_overrides(plan, run, env_id) is not None
    ]
    for k, (run, env_id) in enumerate(todo):
        if not clock.allows(factor=1.0 if k else 0.0):
            skipped(rows, "train", [f"{r} {e}" for r, e in todo[k:]], clock)
            return
        start = time.time()
        overrides = train_overrides(plan, run, env_id)
        algo = overrides.pop("algo")
        try:
            config = make_config(env_id, algo, overrides)
            sps, compile_s = common.time_chunk(config, plan["train"]["repeats"])
            env_sps = _env_alone(plan, config, env_only)
        except Exception as err:  # noqa: BLE001
            status = "does not fit" if _out_of_memory(err) else "failed"
            rows.emit("train", "error", run=run, env=env_id, status=status, error=_error_text(err))
            clock.last = time.time() - start
            continue
        rows.emit(
            "train",
            run=run,
            env=env_id,
            algo=algo,
            recurrent=config.recurrent,
            conv_features=config.conv_features,
            conv_impl=config.conv_impl,
            num_envs=config.num_envs,
            num_steps=config.num_steps,
            updates_per_chunk=config.log_every,
            env_steps_per_s=sps,
            compile_s=compile_s,
            env_alone_steps_per_s=env_sps,
            env_fraction=None if not env_sps else sps / env_sps,
        )
        clock.last = time.time() - start


def _env_alone(plan: dict, config, cache: dict) -> float | None:
    """env-steps/s of ``vmap(env.step)`` alone on the chunk's envs and steps (random legal
    actions; compiled once per game and size)."""
    import jax
    import run_all

    import dilemmax

    steps = config.num_steps * config.log_every
    key = (config.env, json.dumps(config.env_kwargs, sort_keys=True), config.num_envs, steps)
    if key not in cache:
        env = dilemmax.make(config.env, **config.env_kwargs)
        runner = run_all.make_runner(env, "vmap_step", config.num_envs, steps)
        program = runner.lower(jax.random.key(0)).compile()
        best, _ = run_all.time_round_robin({"env": program}, plan["train"]["repeats"])
        cache[key] = config.num_envs * steps / best["env"]
    return cache[key]


# ----------------------------------------------------------------------------- RL^2
def part_rl2(plan: dict, clock: Clock, rows: Rows, out: Path) -> None:
    """The RL^2 curriculum script with STEPS per stage sized to the time left, killed (as a
    process group) at the part's deadline; every results page it wrote is recorded."""
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="dilemmax-rl2-"))
    (work / "pages").mkdir()
    low, high = plan["rl2_steps"]
    measured = [
        r
        for r in rows.read()
        if r.get("part") == "train" and r.get("run") == "rppo" and r.get("env") == "open_harvest"
    ]
    sps = measured[-1]["env_steps_per_s"] if measured else None
    # A stage spends about a third of its time compiling and evaluating; aim the first stage's
    # training at a third of the part, the rest for evaluation and the next stage.
    steps = int(min(high, max(low, (sps or 0) * clock.left() / 3)))
    env = {
        **os.environ,
        **plan["rl2"],
        "STEPS": str(steps),
        "PYTHON": sys.executable,
        "RUNS": str(work / "runs"),
        "PAGES": str(work / "pages"),
        "EXTRA_SETS": plan["rl2_extra"],
    }
    script = ROOT / "benchmarks" / "learning" / "rl2_accelerator.sh"
    seconds = clock.left() if plan["rl2_cap_s"] is None else min(clock.left(), plan["rl2_cap_s"])
    process = subprocess.Popen(["bash", str(script)], env=env, cwd=ROOT, start_new_session=True)
    _STARTED_GROUPS.append(process)
    rows.emit(
        "rl2",
        "start",
        steps_per_stage=steps,
        sized_from_sps=sps,
        process_group=process.pid,
        **plan["rl2"],
    )
    try:
        rc = process.wait(timeout=max(seconds, 1.0))
        status = "done" if rc == 0 else f"failed (exit {rc})"
    except subprocess.TimeoutExpired:
        stop_group(process, grace=0.0)
        status = "partial (stopped at the part's deadline)"
        skipped(rows, "rl2", ["the rest of the curriculum (stopped at the deadline)"], clock)
    for page in sorted((work / "pages").glob("*.md")):
        rows.emit("rl2", stage=page.stem, page=page.read_text())
    for metrics in sorted((work / "runs").glob("*/metrics.jsonl")):
        lines = [line for line in metrics.read_text().splitlines() if line.strip()]
        last = json.loads(lines[-1]) if lines else {}
        rows.emit(
            "rl2",
            "training",
            run=metrics.parent.name,
            chunks=len(lines),
            env_steps=last.get("env_steps"),
            env_steps_per_s=last.get("env_steps_per_s"),
            evaluated=any(
                p.stem.endswith(metrics.parent.name) for p in (work / "pages").glob("*.md")
            ),
        )
    rows.emit("rl2", "end", status=status)


PART_FUNCTIONS = {
    "meta": part_meta,
    "env": part_env,
    "ab": part_ab,
    "train": part_train,
    "rl2": part_rl2,
}


def child(part: str, deadline: float, out: Path, tiny: bool) -> int:
    """Runs one part in this process; records its end (done / cut short / failed)."""
    sys.path[:0] = MODULE_PATHS
    signal.signal(signal.SIGTERM, _stop_started_groups)
    rows, clock = Rows(out), Clock(deadline)
    plan = TINY if tiny else FULL
    start = time.time()
    try:
        PART_FUNCTIONS[part](plan, clock, rows, out)
    except Exception as err:  # noqa: BLE001
        rows.emit(
            part,
            "status",
            status="failed",
            error=_error_text(err),
            traceback=traceback.format_exc()[-3000:],
            seconds=time.time() - start,
        )
        return 1
    cut = any(r["kind"] == "cut" and r["part"] == part for r in rows.read())
    rows.emit(part, "status", status="cut short" if cut else "done", seconds=time.time() - start)
    return 0


# ----------------------------------------------------------------------------- orchestration
def run_child(command: list[str], timeout: float) -> str | None:
    """Runs ``command`` in its own process group; past ``timeout`` seconds, stops the group
    (SIGTERM, which a part passes on to the groups it started; SIGKILL 5 s later).
    Returns None if it exited 0, else what happened."""
    process = subprocess.Popen(command, start_new_session=True)
    try:
        rc = process.wait(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        stop_group(process, grace=5.0)
        return "timed out (killed)"
    return None if rc == 0 else f"exited {rc}"


def stop_group(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM to ``process``'s group (it leads one), SIGKILL after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


# Process groups a part started (the RL^2 script): stopped with the part, so that nothing it
# started outlives it on the machine.
_STARTED_GROUPS: list[subprocess.Popen] = []


def _stop_started_groups(signum, frame) -> None:
    for process in _STARTED_GROUPS:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    os._exit(128 + signum)


def orchestrate(args: argparse.Namespace) -> int:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    rows = Rows(out)
    rows.path.write_text("")
    plan = TINY if args.tiny else FULL
    budget = args.budget if args.budget is not None else plan["budget"]
    start = time.time()
    deadline = start + budget
    rows.emit("run", "start", budget_s=budget, tiny=args.tiny, parts=args.parts, argv=sys.argv[1:])
    parts = ["meta", *args.parts]
    for i, part in enumerate(parts):
        left = deadline - time.time()
        if left < 1.0:
            rows.emit(part, "status", status="not started: no time left", seconds=0.0)
            continue
        if part == "meta":
            share = min(META_SECONDS, max(left, 1.0))
        else:
            rest = sum(WEIGHTS[p] for p in parts[i:])
            share = max(left, 0.0) * WEIGHTS[part] / rest
        # A compile in flight may run past the part's deadline by a grace, never past the run's.
        hard = min(share * 1.5 + args.grace, deadline - time.time())
        # The part stops itself WRAP_UP seconds before it would be killed, to record its end.
        part_deadline = time.time() + max(min(share, hard - WRAP_UP), 0.0)
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            part,
            "--out",
            str(out),
            "--deadline",
            str(part_deadline),
        ]
        if args.tiny:
            command.append("--tiny")
        print(f"== part {part}: {share:.0f} s (killed after {hard:.0f} s)", flush=True)
        part_start = time.time()
        problem = run_child(command, hard)
        if problem is not None:
            ended = any(r["kind"] == "status" and r["part"] == part for r in rows.read())
            if not ended:
                rows.emit(part, "status", status=problem, seconds=time.time() - part_start)
        write_reports(out, rows.read(), plan)
    rows.emit("run", "end", seconds=time.time() - start)
    write_reports(out, rows.read(), plan)
    print((out / "results.md").read_text(), flush=True)
    return 0


# ----------------------------------------------------------------------------- reports
def collect(rows: list[dict]) -> dict:
    """results.json's content: meta, each part's status, every figure, the targets."""
    result: dict = {"meta": {}, "status": {}, "cut": {}, "errors": [], "rl2_pages": {}}
    for part in PARTS:
        result[part] = []
    for row in rows:
        part, kind = row["part"], row["kind"]
        if kind == "meta":
            result["meta"] = row
        elif kind == "status":
            result["status"][part] = row
        elif kind == "cut":
            result["cut"].setdefault(part, []).extend(row["skipped"])
        elif kind == "error":
            result["errors"].append(row)
        elif kind == "row" and part in PARTS:
            if part == "rl2" and "page" in row:
                result["rl2_pages"][row["stage"]] = row["page"]
            else:
                result[part].append(row)
        elif part == "rl2":
            result["rl2"].append(row)
        elif part == "run":
            result[f"run_{kind}"] = row
    for part in ("meta", *PARTS):
        result["status"].setdefault(part, {"status": "not run"})
    result["targets"] = targets(result)
    return result


def targets(result: dict) -> list[dict]:
    """The issue's targets against what was measured (None: not measured)."""
    out = []
    for env_id in GRID:
        got = [
            r["env_steps_per_s"]
            for r in result["env"]
            if r["env"] == env_id and r["mode"] == "vmap_step" and r["num_envs"] == 4096
        ]
        goal = TARGETS[("env", env_id)]
        out.append(_target(f"{env_id} vmap(env.step) at 4,096 envs", goal, got))
    for group, goal in (
        ("short", TARGETS[("train", "short")]),
        ("grid", TARGETS[("train", "grid")]),
    ):
        for env_id in sorted({r["env"] for r in result["train"]}):
            if (env_id in GRID) != (group == "grid"):
                continue
            got = [
                r["env_steps_per_s"]
                for r in result["train"]
                if r["env"] == env_id and r["run"] == "ippo_mlp"
            ]
            out.append(_target(f"{env_id} IPPO training end to end", goal, got))
    return out


def _target(what: str, goal: float, got: list[float]) -> dict:
    best = max(got) if got else None
    verdict = "not measured" if best is None else ("met" if best >= goal else "not met")
    return {"what": what, "target": goal, "measured": best, "verdict": verdict}


def _f(value, digits: int = 0) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def markdown(result: dict, plan: dict) -> str:
    meta = result["meta"]
    lines = [
        "# Accelerator benchmark (`benchmarks/gpu/bench.py`)",
        "",
        f"Mode: {'tiny dry run (CPU-sized)' if plan is TINY else 'full'}. "
        f"jax {meta.get('jax')}, jaxlib {meta.get('jaxlib')}, backend `{meta.get('backend')}`, "
        f"devices {meta.get('devices')}; commit {meta.get('commit')}; load {meta.get('load')}.",
        "",
        "## Parts",
        "",
        "| part | status | seconds | skipped (time share used up) |",
        "| --- | --- | ---: | --- |",
    ]
    for part in ("meta", *PARTS):
        status = result["status"][part]
        cut = "; ".join(result["cut"].get(part, []))
        lines.append(
            f"| {part} | {status.get('status')} | {_f(status.get('seconds'), 1)} | {cut} |"
        )
    lines += [
        "",
        "## Targets (issue #39, one H200)",
        "",
        "| what | target | measured | verdict |",
        "| --- | ---: | ---: | --- |",
    ]
    for t in result["targets"]:
        lines.append(f"| {t['what']} | {_f(t['target'])} | {_f(t['measured'])} | {t['verdict']} |")
    lines += [
        "",
        "## Env throughput (env-steps/s; compile apart)",
        "",
        "| env | N | mode | env-steps/s | ms / batched step | compile s | program MiB |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in result["env"]:
        lines.append(
            f"| {r['env']} | {r['num_envs']:,} | {r['mode']} | {_f(r['env_steps_per_s'])} "
            f"| {_f(r['ms_per_batched_step'], 3)} | {_f(r['compile_s'], 1)} "
            f"| {_f(r['program_mib'], 1)} |"
        )
    lines += [
        "",
        "## CPU-tuned paths against plain JAX (`vmap(env.step)`, alternating calls)",
        "",
        "| env | N | variant | env-steps/s | vs default | compile s |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    conv = []
    for r in result["ab"]:
        if r.get("variant") == "conv3x3 gradient":
            conv.append(r)
            continue
        lines.append(
            f"| {r['env']} | {r['num_envs']:,} | {r['variant']} | {_f(r['env_steps_per_s'])} "
            f"| {_f(r['vs_default'], 2)} | {_f(r['compile_s'], 1)} |"
        )
    if conv:
        lines += [
            "",
            "| conv3x3 gradient in a scan: B, C, F | lax.conv ms | patches+matmul ms "
            "| lax.conv speed-up |",
            "| --- | ---: | ---: | ---: |",
        ]
        for r in conv:
            lines.append(
                f"| {r['batch']}, {r['channels']}, {r['features']} | {_f(r['xla_ms'], 3)} "
                f"| {_f(r['im2col_ms'], 3)} | {_f(r['xla_vs_im2col'], 2)} |"
            )
    lines += [
        "",
        "## Training throughput end to end (rollout + update, one chunk)",
        "",
        "| run | env | N x steps | env-steps/s | env alone env-steps/s | share in env "
        "| compile s |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in result["train"]:
        lines.append(
            f"| {r['run']} | {r['env']} | {r['num_envs']:,} x {r['num_steps']} "
            f"| {_f(r['env_steps_per_s'])} | {_f(r['env_alone_steps_per_s'])} "
            f"| {_f(r['env_fraction'], 2)} | {_f(r['compile_s'], 1)} |"
        )
    lines += ["", "## RL^2 curriculum (time-boxed)", ""]
    rl2_status = result["status"]["rl2"].get("status")
    ended = [r for r in result["rl2"] if r["kind"] == "end"]
    lines.append(
        f"Status: {ended[-1]['status'] if ended else rl2_status}. Stages with a held-out "
        f"evaluation page: {', '.join(result['rl2_pages']) or 'none'}."
    )
    for r in result["rl2"]:
        if r["kind"] == "training":
            lines.append(
                f"- {r['run']}: {r['chunks']} chunks, {r['env_steps']} env steps, "
                f"{_f(r['env_steps_per_s'])} env-steps/s (last chunk)"
            )
    for stage, page in result["rl2_pages"].items():
        lines += ["", f"### {stage}", "", page]
    if result["errors"]:
        lines += ["", "## Errors", ""]
        for e in result["errors"]:
            details = {k: v for k, v in e.items() if k not in ("part", "kind")}
            lines.append(f"- {e['part']}: {json.dumps(details, default=str)}")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    env_ids = sorted({r["env"] for r in result["env"]})
    if not env_ids:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(env_ids), figsize=(4.2 * len(env_ids), 3.6), squeeze=False)
    for ax, env_id in zip(axes[0], env_ids, strict=True):
        for mode in ("vmap_step", "vecenv", "step_env"):
            pts = sorted(
                (r["num_envs"], r["env_steps_per_s"])
                for r in result["env"]
                if r["env"] == env_id and r["mode"] == mode
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=mode)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(env_id)
        ax.set_xlabel("envs N")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("env-steps / s")
    axes[0][0].legend()
    meta = result["meta"]
    fig.suptitle(f"{meta.get('devices')} jax {meta.get('jax')}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_reports(out: Path, rows: list[dict], plan: dict) -> None:
    result = collect(rows)
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "results.md").write_text(markdown(result, plan))
    try:
        plot(result, out / "env_throughput.png")
    except Exception as err:  # noqa: BLE001  (a missing plotting library costs the plot alone)
        print(f"plot not written: {_error_text(err)}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-results")))
    parser.add_argument("--tiny", "--dry-run", action="store_true", help="tiny sizes, any backend")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the whole run (full: 510; tiny: 1200)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds a part may overrun its share before it is killed",
    )
    parser.add_argument("--child", choices=tuple(PART_FUNCTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args.child, args.deadline, args.out, args.tiny)
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
