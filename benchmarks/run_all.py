"""Every env's throughput in one command: `vmap(env.step)` / `VecEnv` / `vmap(env.step_env)`.

For each env and batch size N, one jitted `lax.scan` of `--steps` batched steps; every agent
plays a uniformly random legal action; observations and rewards are summed into the carry so
nothing is dropped; compilation is timed apart; the best of `--repeats` calls counts, each
blocked on. Grid games (episodes of 2,000 steps) start with their envs spread uniformly over
the episode, as in a long training run, so trial re-lays and episode resets happen on the
measured steps at their natural rate (about N / 400 and N / 2,000 per step).

Writes `<out>.md` (one table, the machine, its load, the jax version and the device),
`<out>.json` and one throughput-vs-N plot per env (`<out>_<env>.png`).

    python benchmarks/run_all.py                  # CPU defaults, a few minutes on 2 quiet cores
    python benchmarks/run_all.py --device gpu     # the same on an accelerator (larger N)
    python benchmarks/run_all.py --envs open_harvest --sizes 256 --modes vmap_step step_env
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import load, machine, peak_rss_mib, uniform_legal_actions  # noqa: E402

import dilemmax  # noqa: E402
from dilemmax.wrappers.vec import VecEnv  # noqa: E402

MODES = ("vmap_step", "vecenv", "step_env")
GRID_ENVS = ("open_cleanup", "open_harvest")
DEFAULT_SIZES = {
    # CPU: about 8 minutes on 2 quiet cores, most of it compiling (one program per env, N and
    # mode); larger N for the grid games only costs time (`--sizes 1 256 4096 65536`).
    "cpu": {"grid": (1, 256, 4096), "other": (1, 1024, 65536)},
    "gpu": {"grid": (1, 256, 4096, 16384, 65536), "other": (1, 4096, 65536, 262144)},
}
DEFAULT_STEPS = {"grid": 100, "other": 20}
RESULTS = Path(__file__).resolve().parent / "results"


def random_legal_actions(env, key: jax.Array, masks: dict) -> dict:
    """agent -> int32[N]: a uniformly random legal action per agent and env (one uint32 each;
    see :func:`timing.uniform_legal_actions`)."""
    return uniform_legal_actions(key, {a: masks[a] for a in env.agents})


def stagger(env, state, key: jax.Array):
    """Spreads a batch of fresh grid-game states uniformly over the episode's steps (trial,
    trial step and time), so re-lays and resets fall on the measured steps at their usual rate;
    other envs are returned as they are."""
    if not all(hasattr(state, f) for f in ("trial", "trial_step", "time")):
        return state
    num_envs = state.time.shape[0]
    elapsed = jax.random.randint(key, (num_envs,), 0, env.max_steps, dtype=jnp.int32)
    return state.replace(
        trial=elapsed // env.trial_steps, trial_step=elapsed % env.trial_steps, time=elapsed
    )


def _checksum(tree) -> jax.Array:
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(tree))


def make_runner(env, mode: str, num_envs: int, num_steps: int):
    """A jitted ``key -> (checksum, episodes ended)`` that plays ``num_steps`` batched steps."""
    vec = VecEnv(env, num_envs)
    vmapped = {"vmap_step": jax.vmap(env.step), "step_env": jax.vmap(env.step_env)}

    def run(key):
        key_reset, key_stagger, key_run = jax.random.split(key, 3)
        if mode == "vecenv":
            obs, state = vec.reset(key_reset)
            state = state.replace(env_states=stagger(env, state.env_states, key_stagger))
            masks_of = vec.action_mask
        else:
            obs, state = jax.vmap(env.reset)(jax.random.split(key_reset, num_envs))
            state = stagger(env, state, key_stagger)
            masks_of = jax.vmap(env.action_mask)

        def body(carry, step_key):
            state, total = carry
            key_act, key_step = jax.random.split(step_key)
            actions = random_legal_actions(env, key_act, masks_of(state))
            if mode == "vecenv":
                obs, state, rewards, dones, _ = vec.step(key_step, state, actions)
            else:
                keys = jax.random.split(key_step, num_envs)
                obs, state, rewards, dones, _ = vmapped[mode](keys, state, actions)
            total = total + _checksum(obs) + _checksum(rewards)
            return (state, total), jnp.sum(dones["__all__"])

        (_, total), ended = jax.lax.scan(
            body, (state, _checksum(obs)), jax.random.split(key_run, num_steps)
        )
        return total, jnp.sum(ended)

    return jax.jit(run)


def program_mib(compiled) -> float | None:
    """Arguments + outputs + temporaries of a compiled program, in MiB (None if unknown)."""
    try:
        stats = compiled.memory_analysis()
        used = stats.argument_size_in_bytes + stats.output_size_in_bytes
        return (used + stats.temp_size_in_bytes) / 2**20
    except Exception:  # not every backend reports it
        return None


def device_peak_mib() -> float | None:
    """The device allocator's peak so far (accelerators), else None."""
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**20


def time_round_robin(programs: dict, repeats: int) -> tuple[dict, dict]:
    """(name -> best seconds, name -> episodes ended in the last call) of compiled runners
    (``make_runner``'s, or any ``key -> (checksum, ended)``): each called once to warm up, then
    ``repeats`` rounds, one blocked-on call of each program per round, so a load that comes and
    goes hits them alike."""
    for program in programs.values():
        jax.block_until_ready(program(jax.random.key(0)))  # warm-up
    best = dict.fromkeys(programs, float("inf"))
    ended = dict.fromkeys(programs, 0)
    for r in range(repeats):
        for name, program in programs.items():
            start = time.perf_counter()
            _, ended[name] = jax.block_until_ready(program(jax.random.key(r + 1)))
            best[name] = min(best[name], time.perf_counter() - start)
    return best, ended


def compile_all(lowered: dict, parallel: bool = False) -> tuple[dict, dict]:
    """(name -> compiled program, name -> compile seconds) of ``jax.jit(...).lower(...)``
    results. ``parallel``: compiled side by side in threads (XLA compiles outside the GIL, so on
    a many-core machine the wall time is about the slowest program's, not the sum; each
    program's seconds then overlap the others')."""

    def one(name):
        start = time.perf_counter()
        compiled = lowered[name].compile()
        return name, compiled, time.perf_counter() - start

    if parallel and len(lowered) > 1:
        with ThreadPoolExecutor(max_workers=len(lowered)) as pool:
            done = list(pool.map(one, lowered))
    else:
        done = [one(name) for name in lowered]
    return {n: c for n, c, _ in done}, {n: s for n, _, s in done}


def measure(
    env,
    modes: list[str],
    num_envs: int,
    num_steps: int,
    repeats: int,
    parallel_compile: bool = False,
) -> list[dict]:
    """One row per mode. The modes' timed calls alternate (round robin), so a load that comes and
    goes on a shared machine hits them alike and their ratios stay meaningful. Compile seconds
    include tracing (``parallel_compile``: see :func:`compile_all`)."""
    key = jax.random.key(0)
    lowered, trace_s = {}, {}
    for mode in modes:
        start = time.perf_counter()
        lowered[mode] = make_runner(env, mode, num_envs, num_steps).lower(key)
        trace_s[mode] = time.perf_counter() - start
    programs, compile_s = compile_all(lowered, parallel_compile)
    rows = {mode: {"compile_s": trace_s[mode] + compile_s[mode]} for mode in modes}
    best, ended = time_round_robin(programs, repeats)
    for mode in modes:
        rows[mode].update(
            mode=mode,
            num_envs=num_envs,
            steps=num_steps,
            env_steps_per_s=num_envs * num_steps / best[mode],
            ms_per_batched_step=1e3 * best[mode] / num_steps,
            episodes_ended=int(ended[mode]),
            program_mib=program_mib(programs[mode]),
            device_peak_mib=device_peak_mib(),
            process_peak_rss_mib=peak_rss_mib(),
            load=load(),
        )
    return [rows[mode] for mode in modes]


def select_device(name: str) -> str:
    """Checks the requested backend is the default one and returns its name."""
    backend = jax.default_backend()
    if name != "default" and backend != name:
        raise SystemExit(
            f"--device {name} asked for, but JAX's default backend is {backend!r} "
            f"(devices: {jax.devices()}); install the matching jaxlib or use --device {backend}"
        )
    return backend


def table(rows: list[dict]) -> str:
    lines = [
        "| env | N | mode | env-steps/s | ms / batched step | vs step_env | compile s "
        "| program MiB | episodes ended | load (1 min) |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ceiling = {(r["env"], r["num_envs"]): r for r in rows if r["mode"] == "step_env"}
    for r in rows:
        base = ceiling.get((r["env"], r["num_envs"]))
        ratio = f"{r['env_steps_per_s'] / base['env_steps_per_s']:.2f}" if base else ""
        mib = "" if r["program_mib"] is None else f"{r['program_mib']:,.1f}"
        lines.append(
            f"| {r['env']} | {r['num_envs']:,} | {r['mode']} | {r['env_steps_per_s']:,.0f} "
            f"| {r['ms_per_batched_step']:.3f} | {ratio} | {r['compile_s']:.1f} | {mib} "
            f"| {r['episodes_ended']} | {r['load'].split()[2]} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], env_id: str, path: Path, header: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for mode in MODES:
        pts = sorted(
            (r["num_envs"], r["env_steps_per_s"])
            for r in rows
            if r["env"] == env_id and r["mode"] == mode
        )
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=mode)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of envs N")
    ax.set_ylabel("env-steps / s")
    ax.set_title(f"{env_id}\n{header}", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=None, help="default: every registered env")
    parser.add_argument("--sizes", nargs="+", type=int, default=None, help="batch sizes N")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--steps", type=int, default=None, help="batched steps per timed call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="default", choices=("default", "cpu", "gpu", "tpu"))
    parser.add_argument("--out", type=Path, default=None, help="default: results/run_all_<dev>")
    parser.add_argument("--no-plots", action="store_true")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    backend = select_device(args.device)
    sizes_of = DEFAULT_SIZES["cpu" if backend == "cpu" else "gpu"]
    env_ids = args.envs or [e for e in dilemmax.registered_envs() if e != "toy"]
    out = args.out or RESULTS / f"run_all_{backend}"
    header = f"{machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    print(f"# {header}\n# start: {load()}", flush=True)
    rows = []
    for env_id in env_ids:
        kind = "grid" if env_id in GRID_ENVS else "other"
        env = dilemmax.make(env_id)
        steps = args.steps or DEFAULT_STEPS[kind]
        for num_envs in args.sizes or sizes_of[kind]:
            for row in measure(env, args.modes, num_envs, steps, args.repeats):
                row = {"env": env_id, **row}
                rows.append(row)
                print(
                    f"{env_id:>13} N={num_envs:<6} {row['mode']:>9}: "
                    f"{row['env_steps_per_s']:>13,.0f} env-steps/s, compile "
                    f"{row['compile_s']:.1f} s, {row['load']}",
                    flush=True,
                )
    text = "\n".join(
        [
            "# Throughput of every env (`python benchmarks/run_all.py`)",
            "",
            f"Machine: {header}; backend `{backend}`. Load at the end: {load()}.",
            f"Process peak RSS {peak_rss_mib():,.0f} MiB"
            + (f"; device peak {device_peak_mib():,.0f} MiB." if device_peak_mib() else "."),
            "",
            "Random legal actions; observations and rewards consumed; compile time apart; best of"
            f" {args.repeats} calls, blocked on, the modes' calls alternating. `vs step_env`:"
            " throughput relative to the no-reset ceiling at the same N. `program MiB`: the"
            " compiled program's arguments, outputs and temporaries. Grid envs start spread over"
            " their episodes (see the script).",
            "",
            table(rows),
            "",
        ]
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.md").write_text(text)
    Path(f"{out}.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    if not args.no_plots:
        for env_id in env_ids:
            plot(rows, env_id, Path(f"{out}_{env_id}.png"), header)
    print(text)
    print(f"written to {out}.md / .json" + ("" if args.no_plots else " / _<env>.png"))


if __name__ == "__main__":
    main()
