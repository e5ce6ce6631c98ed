"""Why grid-game training was slow on CPU, and what the CPU defaults cost: convolutions in loops.

XLA:CPU runs a convolution's kernel gradient (backward-filter) inside a loop body 10-20x slower
than at top level (jax-ml/jax#12868), and every PPO update runs inside ``lax.scan``. Measured:

1. one Conv3x3 layer's gradient (w.r.t. kernel and input) on a [B, 11, 11, C] batch, inside a
   4-step ``lax.scan`` and unrolled, for ``conv_impl`` = "xla" and "im2col";
2. one jitted training chunk on open_harvest (rollout + PPO epochs), env-steps/s, for the
   2-layer CNN under each implementation and for the embedding + MLP encoder (no convolution)
   that is the grid games' default on CPU.

    python benchmarks/learning/conv_cpu.py
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from common import RESULTS, command_line, machine_note, table, time_chunk

from dilemmax.agents.networks import Conv3x3
from dilemmax.train.configure import make_config


def layer_gradient_ms(impl: str, batch: int, channels: int, features: int, unroll: bool) -> float:
    """Milliseconds per Conv3x3 gradient, four of them in one scan, blocked on."""
    conv = Conv3x3(features, impl)
    x = jax.random.normal(jax.random.PRNGKey(0), (4, batch, 11, 11, channels))
    params = conv.init(jax.random.PRNGKey(1), x[0])
    grad = jax.grad(lambda p, xx: jnp.tanh(conv.apply(p, xx)).sum(), argnums=(0, 1))

    def body(total, xx):
        g_params, g_x = grad(params, xx)
        leaves = jax.tree.leaves(g_params) + [g_x]
        return total + sum(jnp.sum(v) for v in leaves), None

    fn = jax.jit(lambda xs: jax.lax.scan(body, 0.0, xs, unroll=unroll)[0])
    jax.block_until_ready(fn(x))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(x))
    return (time.perf_counter() - t0) / 4 * 1000


def chunk_steps_per_s(overrides: dict, repeats: int) -> tuple[float, float]:
    """(env-steps/s, compile s) of one training chunk of open_harvest under ``overrides``."""
    config = make_config("open_harvest", "ippo", {"progress": False, "eval_every": 0, **overrides})
    return time_chunk(config, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "learning_conv_cpu.md"))
    args = parser.parse_args()

    layer_rows = []
    for batch, channels, features in [(640, 24, 16), (2560, 24, 16), (2560, 16, 32)]:
        for impl in ("xla", "im2col"):
            looped = layer_gradient_ms(impl, batch, channels, features, unroll=False)
            unrolled = layer_gradient_ms(impl, batch, channels, features, unroll=True)
            layer_rows.append([impl, batch, channels, features, looped, unrolled])
            print(layer_rows[-1], flush=True)

    # A small chunk, so that the slow variant finishes: 8 envs x 64 steps, 1 update, 1 epoch.
    small = {"num_envs": 8, "num_steps": 64, "log_every": 1, "update_epochs": 1}
    cnn = {"conv_features": [16, 32], "embed_dim": 8, "hidden": 128}
    variants = [
        ("CNN [16, 32], conv_impl=xla", {**small, **cnn, "conv_impl": "xla"}),
        ("CNN [16, 32], conv_impl=im2col", {**small, **cnn, "conv_impl": "im2col"}),
        ("embedding + MLP (CPU default)", small),
        ("CNN [16, 32], im2col, default run size", {**cnn, "conv_impl": "im2col"}),
        ("embedding + MLP, default run size", {}),
    ]
    chunk_rows = []
    for name, overrides in variants:
        steps_per_s, compile_s = chunk_steps_per_s(overrides, args.repeats)
        shown = {k: v for k, v in overrides.items() if k not in cnn and k != "conv_impl"}
        chunk_rows.append([name, str(shown or "defaults"), steps_per_s, compile_s])
        print(chunk_rows[-1], flush=True)

    text = f"""# Convolutions on XLA:CPU: inside a loop, and in a training chunk

Command: `{command_line()}`

Machine: {machine_note()}.

## One 3x3 convolution layer's gradient (kernel and input), ms per gradient

Four gradients in one `lax.scan` ("in a loop", how the PPO epochs and minibatches run) or the
same scan unrolled (top level); input [B, 11, 11, C], F output channels, blocked on.

{table(["conv_impl", "B", "C", "F", "in a loop (ms)", "unrolled (ms)"], layer_rows)}

## One training chunk on open_harvest (rollout + PPO update), env-steps/s

Default grid config otherwise (`make_config("open_harvest")`: 5 learners sharing parameters,
16 envs x 128 steps, 4 epochs x 4 minibatches, 5 updates per chunk), timed over
{args.repeats} chunks after a compiling call.

{table(["network", "overrides", "env-steps/s", "compile s"], chunk_rows)}
"""
    with open(args.out, "w") as f:
        f.write(text)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
