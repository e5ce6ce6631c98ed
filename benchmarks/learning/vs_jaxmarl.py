"""dilemmax's ``make_train`` against JaxMARL's own IPPO-FF, side by side in one process (A/B).

Both trainers run the same dilemmax env at the same sizes: ``--num-envs`` envs, 128-step
rollouts, 4 epochs x 4 minibatches, a 64x64 tanh MLP actor and critic, one seed. Each timed call
is one jitted ``train`` of ``--updates`` updates (rollout + PPO epochs); compilation is excluded
(a first call compiles), the two trainers are then called alternately ``--repeats`` times each
(A, B, A, B, ...) and the best call of each counts. Alternating keeps a change of machine load
from favouring one side, so the ratio is the figure to read on a shared machine.

JaxMARL's IPPO scripts are not in its pip wheel. Pass the path of ``baselines/IPPO/ippo_ff_mpe.py``
from a JaxMARL checkout at the release matching ``jaxmarl==0.2.0``
(``git clone https://github.com/FLAIROx/JaxMARL``; the file is not copied into this repository)::

    python benchmarks/learning/vs_jaxmarl.py --jaxmarl-ippo ~/JaxMARL/baselines/IPPO/ippo_ff_mpe.py

(or set ``JAXMARL_IPPO`` to that path). The script's own ``make_train`` is imported and driven
exactly as JaxMARL drives its envs: ``jaxmarl.make`` returns the dilemmax env, wrapped in
``jaxmarl.wrappers.baselines.LogWrapper`` (the MPE script's ``MPELogWrapper`` is swapped for the
generic one, as the drop-in documents), with ``wandb.log`` a no-op. Its optional imports
(hydra, omegaconf) are stubbed when absent: only its ``main`` uses them.

The grid games' observations are integer views ``uint8[11, 11, C]``; JaxMARL's script flattens
them (``batchify``) but initialises its network on the unflattened shape, so both trainers get
the views flattened by :class:`FlatViews` and both run the same MLP on them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import types
from pathlib import Path

import jax
import numpy as np
from common import RESULTS, command_line, machine_note, table
from jaxmarl.wrappers.baselines import LogWrapper

import dilemmax
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.spaces import Box
from dilemmax.train.configure import make_config
from dilemmax.train.ppo import make_train

ENV_IDS = ["consequence", "moral_hazard", "open_cleanup", "open_harvest"]
NUM_STEPS, EPOCHS, MINIBATCHES, HIDDEN = 128, 4, 4, 64


class FlatViews(MultiAgentEnv):
    """``env`` with every observation flattened to one axis (same values and dtype)."""

    def __init__(self, env: MultiAgentEnv):
        super().__init__(env.num_agents, env.agents)
        self._env = env
        self.max_steps = env.max_steps
        self.obs_from_state = env.obs_from_state
        self.gathered_resets = env.gathered_resets

    def _flat(self, obs: dict) -> dict:
        return {a: o.reshape(-1) for a, o in obs.items()}

    def sample_config(self, key):
        return self._env.sample_config(key)

    def reset_to(self, key, config):
        obs, state = self._env.reset_to(key, config)
        return self._flat(obs), state

    def step_env(self, key, state, actions):
        obs, state, rewards, dones, infos = self._env.step_env(key, state, actions)
        return self._flat(obs), state, rewards, dones, infos

    def get_obs(self, state):
        return self._flat(self._env.get_obs(state))

    def action_mask(self, state):
        return self._env.action_mask(state)

    def observation_space(self, agent):
        space = self._env.observation_space(agent)
        low, high = np.min(np.asarray(space.low)), np.max(np.asarray(space.high))
        return Box(low.item(), high.item(), (int(np.prod(space.shape)),), space.dtype)

    def action_space(self, agent):
        return self._env.action_space(agent)


def bench_env(env_id: str) -> MultiAgentEnv:
    env = dilemmax.make(env_id)
    if len(env.observation_space(env.agents[0]).shape) > 1:
        env = FlatViews(env)
    return env


def _stub_missing(*names: str) -> None:
    """Empty modules for the script's imports that only its ``main`` uses."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            stub = types.ModuleType(name)
            stub.main = lambda *a, **k: lambda fn: fn
            stub.OmegaConf = None
            sys.modules[name] = stub


def load_jaxmarl_ippo(path: str) -> types.ModuleType:
    """JaxMARL's ``ippo_ff_*.py`` as a module whose ``make_train`` runs a dilemmax env."""
    _stub_missing("hydra", "omegaconf")
    spec = importlib.util.spec_from_file_location("jaxmarl_ippo_ff", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.LogWrapper = LogWrapper
    module.wandb = types.SimpleNamespace(log=lambda metric: None)
    return module


def jaxmarl_train(module, env: MultiAgentEnv, num_envs: int, updates: int):
    module.jaxmarl = types.SimpleNamespace(make=lambda name, **kwargs: env)
    config = {
        "ENV_NAME": "dilemmax",
        "ENV_KWARGS": {},
        "LR": 2.5e-4,
        "NUM_ENVS": num_envs,
        "NUM_STEPS": NUM_STEPS,
        "TOTAL_TIMESTEPS": updates * NUM_STEPS * num_envs,
        "UPDATE_EPOCHS": EPOCHS,
        "NUM_MINIBATCHES": MINIBATCHES,
        "GAMMA": 0.99,
        "GAE_LAMBDA": 0.95,
        "CLIP_EPS": 0.2,
        "ENT_COEF": 0.01,
        "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 0.5,
        "ACTIVATION": "tanh",
        "ANNEAL_LR": True,
    }
    return jax.jit(module.make_train(config))


def dilemmax_train(env_id: str, env: MultiAgentEnv, num_envs: int, updates: int):
    config = make_config(
        env_id,
        overrides={
            "num_envs": num_envs,
            "num_steps": NUM_STEPS,
            "total_timesteps": updates * NUM_STEPS * num_envs,
            "log_every": updates,
            "update_epochs": EPOCHS,
            "num_minibatches": MINIBATCHES,
            "hidden": HIDDEN,
            "num_layers": 1,  # encoder layer + torso layer: the 64x64 MLP
            "activation": "tanh",
            "agent_id": False,
            "train_grid": None,  # the env's own sampler, as JaxMARL's reset uses
            "progress": False,
        },
    )
    return jax.jit(make_train(config, env=env))


def _timed(fn, key) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(key))
    return time.perf_counter() - t0


def compare(env_id, num_envs, updates, repeats, module) -> list:
    env = bench_env(env_id)
    ours, theirs = dilemmax_train(env_id, env, num_envs, updates), None
    theirs = jaxmarl_train(module, env, num_envs, updates)
    key = jax.random.PRNGKey(0)
    for fn in (ours, theirs):
        _timed(fn, key)  # compile
    best = {"ours": np.inf, "theirs": np.inf}
    for r in range(repeats):
        k = jax.random.fold_in(key, r + 1)
        best["ours"] = min(best["ours"], _timed(ours, k))
        best["theirs"] = min(best["theirs"], _timed(theirs, k))
    steps = updates * NUM_STEPS * num_envs
    a, b = steps / best["ours"], steps / best["theirs"]
    load = os.getloadavg()[0]
    return [env_id, num_envs, round(a), round(b), round(a / b, 2), f"{load:.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jaxmarl-ippo",
        default=os.environ.get("JAXMARL_IPPO"),
        help="path of baselines/IPPO/ippo_ff_mpe.py in a JaxMARL checkout (or $JAXMARL_IPPO)",
    )
    parser.add_argument("--envs", nargs="+", default=ENV_IDS)
    parser.add_argument("--num-envs", nargs="+", type=int, default=[256, 1024])
    parser.add_argument("--updates", type=int, default=1, help="updates per timed call")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per trainer")
    parser.add_argument("--out", default=str(RESULTS / "learning_vs_jaxmarl.md"))
    args = parser.parse_args()
    if not args.jaxmarl_ippo or not Path(args.jaxmarl_ippo).is_file():
        parser.error(
            "--jaxmarl-ippo PATH: JaxMARL's baselines/IPPO/ippo_ff_mpe.py (from a checkout of "
            "FLAIROx/JaxMARL at the jaxmarl 0.2.0 release) is needed; it is not in the wheel"
        )
    module = load_jaxmarl_ippo(args.jaxmarl_ippo)
    rows = []
    for env_id in args.envs:
        for num_envs in args.num_envs:
            rows.append(compare(env_id, num_envs, args.updates, args.repeats, module))
            print(rows[-1], flush=True)
    header = ["env", "num_envs", "dilemmax env-steps/s", "JaxMARL env-steps/s", "ratio", "load"]
    text = f"""# dilemmax `make_train` vs JaxMARL `ippo_ff` (A/B in one process)

Command: `{command_line()}`

Machine: {machine_note()}.

JaxMARL script: `{args.jaxmarl_ippo}` (`--jaxmarl-ippo` or `$JAXMARL_IPPO`).

Same dilemmax env and sizes for both: {NUM_STEPS}-step rollouts, {EPOCHS} epochs x
{MINIBATCHES} minibatches, a {HIDDEN}x{HIDDEN} tanh MLP actor and critic, one seed; each timed
call is a jitted `train` of {args.updates} update(s), compile excluded; the two trainers are
called alternately, best of {args.repeats} each. env-steps count one step of one env (all agents
act). `load` is the 1-minute load average after the pair. On a shared machine the absolute
figures are loaded; the interleaved ratio (dilemmax / JaxMARL) is the figure to read.

{table(header, rows)}
"""
    Path(args.out).write_text(text)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
