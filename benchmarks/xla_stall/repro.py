"""XLA:CPU never finishes a program of several independent batched QR factorisations.

    python repro.py       # jaxlib 0.10.2 on 2 cores: "STALLED" (exit 3) after 20 s of idle CPU
    XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false python repro.py   # completes

The program is what ``jax.vmap`` over a flax network init with orthogonal kernels compiles to:
``n`` independent chains random-normal -> QR, each QR over a batch of ``b`` matrices. jaxlib's
batched LAPACK kernel (``lapack_sgeqrf_ffi``) splits its batch over XLA's intra-op thread pool
(``jax::ParallelBatchMap``) and blocks on a ``BlockingCounter`` until its parts are done. When
the thunk executor runs as many of those kernels concurrently as the pool has threads (the pool
is sized from the process's CPU affinity: 2 threads on a 2-core machine), every pool thread
waits for parts that only a pool thread could run: a deadlock with every thread idle (gdb: the
pool threads in ``ParallelBatchMap`` -> ``BlockingCounter::Wait``, the other XLA threads in
``WaitForWork``, the caller in ``BlockUntilReady``). The concurrency-optimised scheduler orders
the independent chains so that their QRs become ready together; without it they are spread out.

On a machine with more cores, pin the process to two (``taskset -c 0,1 python repro.py``) or
raise ``--chains``. No output at all and frozen CPU time means the same: stalled.

Stall detection: a watcher thread reads this process's CPU time (``os.times``); when it has not
advanced by 0.2 s in ``--idle`` seconds while the main thread waits for the result, the script
prints STALLED and exits with status 3 (the computation cannot be cancelled).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import jax
import jax.numpy as jnp
import jaxlib


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def watch(idle: float, done: threading.Event, what: list[str]) -> None:
    """Exits the process (status 3) when its CPU time stops advancing for ``idle`` seconds."""
    last, since = cpu_seconds(), time.monotonic()
    while not done.wait(1.0):
        now = cpu_seconds()
        if now - last > 0.2:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > idle:
            print(
                f"STALLED in {what[0]}: CPU time {now:.1f} s, unchanged for {idle:.0f} s",
                flush=True,
            )
            os._exit(3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chains", type=int, default=16, help="independent random -> QR chains")
    p.add_argument("--batch", type=int, default=2, help="matrices per QR (> 1: a batched QR)")
    p.add_argument("--size", type=int, default=128, help="matrix side")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--idle", type=float, default=20.0, help="seconds of frozen CPU = stalled")
    a = p.parse_args()

    @jax.jit
    def f(key):
        keys = jax.random.split(key, a.chains)
        return [jnp.linalg.qr(jax.random.normal(k, (a.batch, a.size, a.size)))[0] for k in keys]

    print(
        f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, {os.cpu_count()} cpus "
        f"({len(os.sched_getaffinity(0))} in this process's affinity), "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}",
        flush=True,
    )
    what, done = ["compile"], threading.Event()
    threading.Thread(target=watch, args=(a.idle, done, what), daemon=True).start()
    f.lower(jax.random.PRNGKey(0)).compile()
    for i in range(a.calls):
        what[0] = f"call {i}"
        t = time.perf_counter()
        jax.block_until_ready(f(jax.random.PRNGKey(i)))
        print(f"call {i}: {time.perf_counter() - t:.2f} s", flush=True)
    done.set()
    print(f"completed {a.calls} calls; CPU time {cpu_seconds():.1f} s")
    sys.exit(0)


if __name__ == "__main__":
    main()
