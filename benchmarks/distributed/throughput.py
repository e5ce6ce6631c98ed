"""Training throughput on 1, 2 and 4 CPU devices in one process and on 2 processes (1 or 2
devices each), with the cost of the cross-device gradient mean.

    python benchmarks/distributed/throughput.py                 # all layouts, twice, alternated
    python benchmarks/distributed/throughput.py --rounds 1 --chunks 4

Each layout runs in fresh processes (XLA fixes the device count at start-up;
``--xla_force_host_platform_device_count`` splits the host's cores into CPU devices; two
processes talk over gloo on 127.0.0.1). A worker trains ``moral_hazard`` with IPPO for
``--chunks`` chunks and reports the env steps per second of the chunks after the first (which
compiles). It also counts the collectives of the compiled chunk and times, on the same mesh,
the cross-device mean of a gradient-sized tree (the parameters) alone, repeated as often as one
chunk takes gradient steps (``log_every * update_epochs * num_minibatches``): that time over the
chunk's time is the overhead of the mean. Layouts are alternated round by round so a change of
the machine's load hits them alike; ``uptime`` is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from dilemmax.train import distributed
from dilemmax.train.configure import make_config
from dilemmax.train.run import TrainingRun

LAYOUTS = ((1, 1), (1, 2), (1, 4), (2, 1), (2, 2))  # (processes, devices per process)
LAUNCH_TIMEOUT = 600  # seconds a layout may take (compiles included) before it counts as stalled
RESULTS = Path(__file__).resolve().parents[1] / "results" / "distributed.md"
OVERRIDES = dict(num_envs=64, num_steps=16, log_every=5, eval_every=0, progress=False)


def worker(args) -> None:
    if args.processes > 1:
        cluster = distributed.Cluster(
            f"127.0.0.1:{args.port}", args.processes, args.process_id, heartbeat_timeout=60
        )
        distributed.join(cluster)
    chunks = args.chunks
    config = make_config(
        "moral_hazard",
        overrides={**OVERRIDES, "total_timesteps": 64 * 16 * 5 * chunks, "shard": "auto"},
    )
    run = TrainingRun(config, Path(args.out), env=None)
    state = run.init_state()
    seconds = []
    for _ in range(chunks):
        t0 = time.perf_counter()
        state, metrics = run.chunk(state)
        jax.block_until_ready(metrics)
        seconds.append(time.perf_counter() - t0)
    steady = float(np.median(seconds[1:]))
    steps = config.num_envs * config.num_steps * config.log_every
    out = {"steps_per_s": steps / steady, "chunk_s": steady, "compile_s": seconds[0]}
    if run.mesh is not None:
        hlo = run._chunk_fn.lower(state).compile().as_text()
        out["collectives"] = {
            op: len(re.findall(rf"\b{op}(?:-start)?\(", hlo))
            for op in ("all-reduce", "all-gather", "all-to-all", "collective-permute")
        }
        replicated = NamedSharding(run.mesh, PartitionSpec())
        by_device = NamedSharding(run.mesh, PartitionSpec("data"))
        grads = state.params
        per_chunk = config.log_every * config.update_epochs * config.num_minibatches
        n = run.mesh.devices.size
        # Each device's own copy of the gradient, then their mean: the reduction the update
        # needs, on its own.
        stacked = jax.tree.map(
            lambda x: jax.make_array_from_callback(
                (n, *x.shape), by_device, lambda idx, x=x: np.asarray(x)[None]
            ),
            jax.device_get(grads),
        )
        mean = jax.jit(lambda g: jax.tree.map(lambda x: x.mean(0), g), out_shardings=replicated)
        jax.block_until_ready(mean(stacked))
        t0 = time.perf_counter()
        for _ in range(per_chunk):
            result = mean(stacked)
        jax.block_until_ready(result)
        out["mean_s_per_chunk"] = time.perf_counter() - t0
        out["mean_overhead"] = out["mean_s_per_chunk"] / steady
    if jax.process_index() == 0:
        print("RESULT " + json.dumps(out), flush=True)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(processes: int, devices: int, chunks: int, out: Path) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    # A loaded machine can starve a device's thread past XLA's 40 s wait at a collective.
    env["XLA_FLAGS"] = (
        f"--xla_force_host_platform_device_count={devices} "
        "--xla_cpu_collective_call_terminate_timeout_seconds=900"
    )
    port = str(_port())
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", "--processes", str(processes)]
            + ["--process-id", str(i), "--port", port, "--chunks", str(chunks)]
            + ["--out", str(out / f"p{processes}d{devices}")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    try:
        outputs = [p.communicate(timeout=LAUNCH_TIMEOUT) for p in procs]
    except subprocess.TimeoutExpired:
        # XLA's CPU runtime was seen to stall (idle threads, a result never ready): say so.
        for p in procs:
            p.kill()
        return {"stalled": True}
    for p, (_, err) in zip(procs, outputs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(err[-2000:])
    line = next(x for x in outputs[0][0].splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def report(rows: dict, before: str, after: str, rounds: int, chunks: int) -> str:
    rows = {
        k: [r for r in v if not r.get("stalled")] or [{"steps_per_s": float("nan")}]
        for k, v in rows.items()
    }
    base = sum(r["steps_per_s"] for r in rows[(1, 1)]) / len(rows[(1, 1)])
    lines = [
        "# Training throughput over devices and processes (CPU, this machine)",
        "",
        "`python benchmarks/distributed/throughput.py` (moral_hazard, IPPO, 64 envs x 16 steps, "
        f"5 updates a chunk, {chunks} chunks per run, the first left out as it compiles; "
        f"{rounds} rounds, layouts alternated within each round).",
        "",
        f"- uptime before: `{before}`",
        f"- uptime after: `{after}`",
        "",
        "The machine is shared and was loaded (see the load averages): read the ratios between "
        "layouts of one round, not the absolute rates. Forced CPU devices split the same 2 cores, "
        "so more devices cannot add compute here; the figures show what the sharding and the "
        "collectives cost, not the speed-up of real devices.",
        "",
        "| processes x devices | env steps/s (each round) | vs 1 x 1 | collectives in a chunk "
        "(all-reduce / all-gather / all-to-all / permute) | mean of the gradients: s per chunk "
        "(share of the chunk) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for layout in LAYOUTS:
        got = rows[layout]
        rates = ", ".join(f"{r['steps_per_s']:,.0f}" for r in got)
        mean_rate = sum(r["steps_per_s"] for r in got) / len(got)
        coll = got[0].get("collectives")
        coll_text = " / ".join(str(v) for v in coll.values()) if coll else "none (one device)"
        if "mean_s_per_chunk" in got[0]:
            share = sum(r["mean_overhead"] for r in got) / len(got)
            secs = sum(r["mean_s_per_chunk"] for r in got) / len(got)
            mean_text = f"{secs:.4f} s ({100 * share:.1f}%)"
        else:
            mean_text = "-"
        lines.append(
            f"| {layout[0]} x {layout[1]} | {rates} | {mean_rate / base:.2f} | {coll_text} | "
            f"{mean_text} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="/tmp/dilemmax-distributed-bench")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    out = Path(args.out)
    before = uptime()
    rows: dict = {layout: [] for layout in LAYOUTS}
    for done in range(1, args.rounds + 1):
        for processes, devices in LAYOUTS:
            rows[(processes, devices)].append(launch(processes, devices, args.chunks, out))
            print(processes, devices, rows[(processes, devices)][-1], flush=True)
        # Written after every round, so a long benchmark keeps what it measured.
        text = report(rows, before, uptime(), done, args.chunks)
        raw = json.dumps({str(k): v for k, v in rows.items()})
        RESULTS.write_text(text + "\n<!-- raw: " + raw + " -->\n")
    print(text)


if __name__ == "__main__":
    main()
