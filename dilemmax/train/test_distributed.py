"""Training on several processes: two processes on 127.0.0.1 (CPU, gloo collectives, two forced
host devices each, so a global mesh of 4) against one process on 4 devices.

One launch runs three processes side by side: the pair (``pair 0``, ``pair 1``) and a single
process (``single``) that hand each other checkpoints through marker files:

- single trains the reference run and stops a second one after its first chunk (a msgpack
  checkpoint written by one process);
- the pair trains the same run, resumes the single process's checkpoint to the end, and stops a
  third run after its first chunk (an orbax checkpoint written by two processes);
- single resumes that one to the end;
- then process 1 of the pair kills itself (SIGKILL) and process 0, still training, must exit
  within a bounded time with JAX's message that another task died.

The same program runs on the same 4-device mesh either way; only the collectives differ (gloo
between processes, in-process reductions within one), and they may add the devices' partial
sums in another order. The parameters are therefore compared with a tolerance: 1e-5 absolute,
a few float32 roundings of parameters of order 1 after 10 updates (here they came out
bit-identical; the tolerance is for gloo summing in another order elsewhere).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

COMMON = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    import jax, numpy as np
    role, out = sys.argv[1], Path(sys.argv[2])

    def wait_for(name):
        while not (out / name).exists():
            time.sleep(0.05)

    def done(name):
        (out / name).write_text("")

    last = {}

    def train(run, folder, **kw):
        run.dir = out / folder  # one run object: its programs compile once for every folder
        last["state"] = state = run.train(**kw)
        return [np.asarray(x).tolist() for x in jax.tree.leaves(state.params)]
    """
)

PAIR = COMMON + textwrap.dedent(
    """
    from dilemmax.train import distributed
    pid = int(role[-1])
    port = int(sys.argv[3])
    distributed.join(distributed.Cluster(f"127.0.0.1:{port}", 2, pid, heartbeat_timeout=10))
    from dilemmax.train.run import TrainingRun
    from dilemmax.train.test_ppo import ToyEnv, toy_config

    run = TrainingRun(toy_config(total_timesteps=640, eval_every=0), out / "p", env=ToyEnv())
    leaf = jax.tree.leaves(run.init_state().env_state)[0]
    facts = {"devices": jax.device_count(), "local": jax.local_device_count(),
             "env_shard": list(leaf.addressable_shards[0].data.shape[:2]), "orbax": run.orbax}
    result = {"facts": facts, "pair": train(run, "pair")}
    wait_for("single_half.done")
    result["from_single"] = train(run, "single_half", resume=True)
    train(run, "pair_half", max_chunks=1)
    if pid == 0:
        (out / "pair.json").write_text(json.dumps(result))
    done(f"pair_half.done{pid}")
    wait_for("single.json")
    if pid == 1:
        os.kill(os.getpid(), 9)
    print("peer killed at", time.time(), flush=True)
    state = last["state"]
    while True:  # training on: the next collective has no peer
        state, metrics = run.chunk(state)
        jax.block_until_ready(metrics)
    """
)

SINGLE = COMMON + textwrap.dedent(
    """
    from dilemmax.train.run import TrainingRun
    from dilemmax.train.test_ppo import ToyEnv, toy_config
    assert jax.device_count() == 4 and jax.process_count() == 1

    run = TrainingRun(toy_config(total_timesteps=640, eval_every=0), out / "s", env=ToyEnv())
    result = {"single": train(run, "single")}
    train(run, "single_half", max_chunks=1)
    done("single_half.done")
    wait_for("pair_half.done0")
    wait_for("pair_half.done1")
    result["from_pair"] = train(run, "pair_half", resume=True)
    result["names"] = sorted(p.name for p in (out / "pair_half" / "checkpoints").iterdir())

    # Evaluation spread over 2 devices plays the unsharded episodes exactly: 3 configurations
    # x 5 episodes (15 jobs, padded to 16) as rollout / redteam play batch them, and the
    # trainer's evaluation (5 episodes, no configurations) on all 4 devices.
    from jax.sharding import Mesh
    from dilemmax.agents.policy import random_policy
    from dilemmax.envs.rollout import run_episodes
    env, key = ToyEnv(), jax.random.PRNGKey(7)
    configs = jax.vmap(env.sample_config)(jax.random.split(key, 3))
    mesh = Mesh(np.asarray(jax.devices()[:2]), ("episodes",))
    plain = run_episodes(env, random_policy, key, 5, configs, mesh=None)
    spread = run_episodes(env, random_policy, key, 5, configs, mesh=mesh)
    same = [bool(np.array_equal(a, b)) for a, b in
            zip(jax.tree.leaves(plain), jax.tree.leaves(spread), strict=True)]
    state, run.config.eval_episodes = last["state"], 5
    spread = run.evaluate(state, key)
    run.mesh, run._eval_fn = None, None
    same.append(spread == run.evaluate(state, key))
    result["evaluation_same"] = same
    (out / "single.json").write_text(json.dumps(result))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int) -> dict:
    env = dict(os.environ)
    # A loaded CI machine can starve a device's thread past XLA's 40 s wait at a collective.
    flags = f" --xla_force_host_platform_device_count={devices}"
    flags += " --xla_cpu_collective_call_terminate_timeout_seconds=900"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + flags).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    return env


def _max_diff(a, b) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.slow
def test_two_processes_train_like_one_resume_each_other_and_stop_when_a_peer_dies(tmp_path):
    port = str(_free_port())

    def run(script, role, devices, *extra):
        # Output to files: a pipe nobody reads yet could fill and stall a process.
        return subprocess.Popen(
            [sys.executable, "-c", script, role, str(tmp_path), *extra],
            env=_env(devices),
            stdout=(tmp_path / f"{role}.out").open("w"),
            stderr=(tmp_path / f"{role}.err").open("w"),
        )

    procs = {
        "single": run(SINGLE, "single", 4),
        "pair 0": run(PAIR, "pair0", 2, port),
        "pair 1": run(PAIR, "pair1", 2, port),
    }
    try:
        for proc in procs.values():
            proc.wait(timeout=900)
    finally:
        for proc in procs.values():
            proc.kill()
    ended = time.time()
    outputs = {
        name: ((tmp_path / f"{r}.out").read_text(), (tmp_path / f"{r}.err").read_text())
        for name, r in (("single", "single"), ("pair 0", "pair0"), ("pair 1", "pair1"))
    }
    single_out = outputs["single"]
    assert procs["single"].returncode == 0, single_out[1][-3000:]
    assert procs["pair 1"].returncode == -9, outputs["pair 1"][1][-3000:]
    pair = json.loads((tmp_path / "pair.json").read_text())
    single = json.loads((tmp_path / "single.json").read_text())

    # A global mesh of 4 over 2 processes, each holding the envs of its 2 devices.
    assert pair["facts"] == {"devices": 4, "local": 2, "env_shard": [1, 4], "orbax": True}
    # Written once: one metrics line per chunk, by process 0.
    lines = (tmp_path / "pair" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["chunk"] for x in lines] == [0, 1]
    # The same parameters as one process on 4 devices (see the module docstring's tolerance).
    assert _max_diff(pair["pair"], single["single"]) < 1e-5
    # Saved on one process, resumed on two; saved on two (orbax folders), resumed on one.
    assert _max_diff(pair["from_single"], single["single"]) < 1e-5
    assert _max_diff(single["from_pair"], single["single"]) < 1e-5
    assert single["names"] == ["ckpt_000000", "ckpt_000001.msgpack"]
    # Evaluation sharded over the devices: the same episodes as on one device, bit for bit.
    assert single["evaluation_same"] and all(single["evaluation_same"])

    # The dead peer: process 0 stops on its own, with JAX's message, well within the bound.
    rc, err = procs["pair 0"].returncode, outputs["pair 0"][1]
    assert rc not in (0, None), err[-3000:]
    assert "another task died" in err or "unhealthy" in err, err[-3000:]
    killed = float(outputs["pair 0"][0].split("peer killed at")[1].split()[0])
    assert ended - killed < 60


def test_cluster_options_are_checked_before_anything_runs(tmp_path, capsys, monkeypatch):
    from dilemmax.train import cli, distributed

    out = str(tmp_path / "run")
    cases = {
        ("--coordinator", "127.0.0.1"): "--coordinator '127.0.0.1': expected host:port",
        ("--coordinator", "h:1", "--num-processes", "2"): "go together",
        ("--coordinator", "h:1", "--num-processes", "2", "--process-id", "2"): "not in 0..1",
        (
            "--coordinator",
            "h:1",
            "--num-processes",
            "2",
            "--process-id",
            "0",
            "--distributed",
            "off",
        ): "--distributed off contradicts --coordinator",
    }
    for extra, message in cases.items():
        assert cli.main(["train", "moral_hazard", "--out", out, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
    # Started by a launcher as one task of several (SLURM, a TPU pod of several hosts): joins.
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert distributed.launched_as_many()
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "host-0")
    assert not distributed.launched_as_many()
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "host-0,host-1")
    assert distributed.launched_as_many()
    assert not distributed.Cluster(mode="off").wanted()
