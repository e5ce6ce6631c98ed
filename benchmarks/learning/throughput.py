"""Training throughput: env-steps per second of IPPO (and MAPPO) including learning, per env.

For each env at its default training config (``make_config(env, algo)``), one compiled chunk
of ``log_every`` updates (rollout + PPO epochs) is timed after a warm-up call that compiles it;
results are blocked on. env-steps count one step of one env (all agents act in it).

    python benchmarks/learning/throughput.py                    # every registered env, IPPO
    python benchmarks/learning/throughput.py --envs moral_hazard consequence --algos ippo mappo
"""

from __future__ import annotations

import argparse

from common import RESULTS, command_line, machine_note, table, time_chunk

from dilemmax.envs.registry import registered_envs
from dilemmax.train.configure import make_config


def measure(env_id: str, algo: str, repeats: int) -> list:
    config = make_config(env_id, algo, {"progress": False, "eval_every": 0})
    steps_per_s, compile_s = time_chunk(config, repeats)
    return [
        env_id, algo, config.num_envs, config.num_steps, config.log_every, steps_per_s, compile_s,
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=registered_envs())
    parser.add_argument("--algos", nargs="+", default=["ippo"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "learning_throughput.md"))
    args = parser.parse_args()
    rows = []
    for env_id in args.envs:
        for algo in args.algos:
            try:
                rows.append(measure(env_id, algo, args.repeats))
            except (ImportError, ModuleNotFoundError, AttributeError) as err:
                rows.append([env_id, algo, "-", "-", "-", f"not run: {err}", "-"])
            print(rows[-1], flush=True)
    header = ["env", "algo", "num_envs", "num_steps", "updates/chunk", "env-steps/s", "compile s"]
    text = f"""# Training throughput (env-steps/s including learning)

Command: `{command_line()}`

Machine: {machine_note()}. Default training config of each env (`make_config(env, algo)`);
one chunk of `log_every` updates (rollout + {make_config("moral_hazard").update_epochs} PPO
epochs x minibatches) timed over {args.repeats} calls after a compiling warm-up call, blocked
on. Numbers on a shared, loaded machine are lower bounds.

{table(header, rows)}
"""
    with open(args.out, "w") as f:
        f.write(text)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
