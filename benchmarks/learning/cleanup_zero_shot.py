"""Zero-shot check: the open_cleanup stage-3 RL^2 policy (runs/rl2-cleanup-pairs, two-pick-up
recipes, one hue) on the paper's rules (5 hues, 4 tools, two-pick-up recipes) with attempt 3's
eased river (p_spawn 0.02, pollution threshold 0.6), held-out split, 16 episodes, beside random
and greedy. Prints apples per trial (team), the range of the episode means, and cells cleared.

    python benchmarks/learning/cleanup_zero_shot.py
"""

import jax
import numpy as np

import dilemmax
from dilemmax.agents.policy import random_policy
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.rollout import run_episodes
from dilemmax.train.envs import ConfiguredEnv, overrides_as_arrays


def main() -> None:
    base = dilemmax.make("open_cleanup", p_spawn=0.02, split="held_out")
    template = base.sample_config(jax.random.PRNGKey(0))
    env = ConfiguredEnv(base, overrides_as_arrays({"pollution_threshold": 0.6}, template))
    populations = {
        "RL^2 stage 3": TrainedPolicy.load("runs/rl2-cleanup-pairs"),
        "random": random_policy,
        "greedy": base.scripted_policies()["greedy"],
    }
    for name, policy in populations.items():
        _, metrics = run_episodes(env, policy, jax.random.PRNGKey(11), 16)
        metrics = jax.tree.map(np.asarray, metrics)
        apples = metrics["apples_per_trial"].sum(-1).mean(-1)  # [episodes], team per trial
        cleared = metrics["cleaning_per_trial"].sum(-1).mean()
        print(
            f"{name}: apples per trial {apples.mean():.3f} (episodes {apples.min():.1f} to "
            f"{apples.max():.1f}), cells cleared per trial {cleared:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
