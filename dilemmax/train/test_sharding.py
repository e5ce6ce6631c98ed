"""Data parallelism: the env batch sharded over 2 (forced host) devices trains like 1 device.

XLA fixes the device count at start-up, so the check runs in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=2``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from dilemmax.train.run import TrainingRun
    from dilemmax.train.test_ppo import ToyEnv, toy_config

    assert jax.local_device_count() == 2, jax.devices()
    out = {}
    config = toy_config(num_seeds=2, total_timesteps=16 * 4 * 5 * 2, eval_every=0)
    states = {}
    for shard in ("on", "off"):
        config.shard = shard
        run = TrainingRun(config, sys.argv[1] + "/" + shard, env=ToyEnv())
        states[shard] = run.train()
        out[shard + "_mesh"] = run.mesh is not None
    env_leaf = jax.tree.leaves(states["on"].env_state)[0]
    out["env_spec"] = str(env_leaf.sharding.spec)
    out["env_devices"] = len(env_leaf.sharding.device_set)
    out["env_shard_shape"] = list(env_leaf.addressable_shards[0].data.shape)
    out["env_shape"] = list(env_leaf.shape)
    out["param_spec"] = str(jax.tree.leaves(states["on"].params)[0].sharding.spec)
    diffs = [
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(jax.tree.leaves(states["on"].params), jax.tree.leaves(states["off"].params))
    ]
    out["max_param_diff"] = max(diffs)
    print("RESULT " + json.dumps(out))
    """
)


def test_env_batch_shards_over_two_devices_and_matches_one_device(tmp_path):
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT ") :])
    assert out["on_mesh"] and not out["off_mesh"]
    # [seeds, envs, ...] leaves split along the env axis: each device holds half the envs.
    assert out["env_devices"] == 2
    assert out["env_shape"][1] == 16 and out["env_shard_shape"][1] == 8
    assert out["env_shard_shape"][0] == out["env_shape"][0]
    # Parameters stay replicated, and training matches the single-device program (up to the
    # order of floating-point reductions).
    assert "data" not in out["param_spec"]
    assert out["max_param_diff"] < 1e-4
