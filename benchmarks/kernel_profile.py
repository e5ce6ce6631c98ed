"""Where a batched step's time goes, kernel by kernel: the run_all program under JAX's profiler.

Builds exactly the program `run_all.py` times (`make_runner`: random legal actions, observations
and rewards consumed), runs it once to compile and warm up, then once more under
`jax.profiler.trace`, and reads the trace back with `jax.profiler.ProfileData` (no TensorBoard
needed). Prints the kernels (XLA fusions, copies, loops, conditionals) that took the most time,
per batched step, with how many times each ran per step: a kernel that runs on a fraction of the
steps (0.33 for a reset every third step) belongs to a branch of a conditional.

    python benchmarks/kernel_profile.py --env moral_hazard --mode vmap_step
    python benchmarks/kernel_profile.py --env consequence --mode step_env --top 20 --hlo /tmp/c.hlo

Times under the profiler are inflated and summed over threads; compare kernels within one run,
and take throughput from `run_all.py`. `--hlo` writes the optimised program, where a kernel's
name (`%multiply_add_fusion = ...`) shows what it computes and the `op_name` of the JAX code it
came from.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_all import MODES, make_runner  # noqa: E402
from timing import load, machine  # noqa: E402

import dilemmax  # noqa: E402

# Trace events that are the runtime's own bookkeeping, not kernels of the program.
_RUNTIME_EVENTS = ("ThunkExecutor", "Pjit", "Await", "Execute", "ParseArguments", "$")


def kernel_times(compiled, key: jax.Array) -> tuple[collections.Counter, collections.Counter]:
    """(kernel name -> total ns, kernel name -> calls) over one profiled call of ``compiled``."""
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        jax.block_until_ready(compiled(key))
        jax.profiler.stop_trace()
        trace = next(Path(trace_dir).rglob("*.xplane.pb"))
        profile = jax.profiler.ProfileData.from_file(str(trace))
        total, calls = collections.Counter(), collections.Counter()
        for plane in profile.planes:
            for line in plane.lines:
                for event in line.events:
                    if any(marker in event.name for marker in _RUNTIME_EVENTS):
                        continue
                    total[event.name] += event.duration_ns
                    calls[event.name] += 1
    return total, calls


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="moral_hazard")
    parser.add_argument("--mode", choices=MODES, default="vmap_step")
    parser.add_argument("--num-envs", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=30, help="batched steps in the traced call")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--hlo", type=Path, default=None, help="write the optimised HLO here")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    env = dilemmax.make(args.env)
    compiled = make_runner(env, args.mode, args.num_envs, args.steps).lower(jax.random.key(0))
    compiled = compiled.compile()
    if args.hlo is not None:
        args.hlo.write_text(compiled.as_text())
    jax.block_until_ready(compiled(jax.random.key(0)))  # warm-up
    total, calls = kernel_times(compiled, jax.random.key(1))
    per_step = lambda ns: ns / 1e6 / args.steps
    print(f"# {args.env}, {args.mode}, N = {args.num_envs:,}: kernels by time per batched step")
    print(f"\n{machine()}; {load()}; {args.steps} steps traced\n")
    print("| kernel | ms per step | runs per step |")
    print("| --- | ---: | ---: |")
    for name, ns in total.most_common(args.top):
        print(f"| `{name}` | {per_step(ns):.3f} | {calls[name] / args.steps:.2f} |")
    print(
        f"\nAll events: {per_step(sum(total.values())):.2f} ms per step, summed over threads; a "
        "loop or branch (`while`, `cond`) counts the kernels it ran, which are also listed alone."
    )


if __name__ == "__main__":
    main()
