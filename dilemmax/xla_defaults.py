"""The XLA flags dilemmax sets by default, before JAX starts a backend.

XLA reads ``XLA_FLAGS`` once, when JAX starts its first backend (the first array, compile or
``jax.devices()``), not when ``jax`` is imported. ``dilemmax/__init__.py`` imports this module
first, so ``import dilemmax`` (and every ``dilemmax`` command) adds the flags below to
``XLA_FLAGS`` in time, after whatever the user put there. A flag the user set, to any value, is
left as the user set it.

``--xla_cpu_enable_concurrency_optimized_scheduler=false``: jaxlib 0.10's CPU runtime can
deadlock on a program with several independent batched LAPACK calls (the QR factorisations of
``jax.vmap``-ed orthogonal initialisers: separate parameters per learner, several seeds in one
program). Each batched call splits its batch over XLA's intra-op thread pool and blocks until the
parts are done; when the concurrency-optimised scheduler starts as many of those calls at once as
the pool has threads (the pool is as large as the process's CPU set: 2 threads on a 2-core
machine), every pool thread waits for work only a pool thread could do, and the program never
finishes, with no CPU used. Without that scheduler the calls of one program no longer start
together (benchmarks/xla_stall/). Training also makes its initial parameters without batched
QRs (``dilemmax/train/run.py``), which the flag cannot replace: the devices of a sharded program
run their calls at once whatever the scheduler. The flag only changes how XLA:CPU orders a
program's operations; other backends ignore it.
"""

from __future__ import annotations

import os
import sys
import warnings

# name -> value, each set unless XLA_FLAGS already names it.
DEFAULT_FLAGS = {"xla_cpu_enable_concurrency_optimized_scheduler": "false"}


def named_flags(xla_flags: str) -> set[str]:
    """The flag names ``--name``, ``--name=value`` and ``--noname`` in an XLA_FLAGS string."""
    names = set()
    for word in xla_flags.split():
        name = word.lstrip("-").split("=", 1)[0]
        names.add(name)
        if name.startswith("no"):
            names.add(name[2:])  # absl's --noflag sets a boolean flag to false
    return names


def missing_flags(xla_flags: str) -> list[str]:
    """The default flags (``--name=value``) that ``xla_flags`` does not name."""
    given = named_flags(xla_flags)
    return [f"--{name}={value}" for name, value in DEFAULT_FLAGS.items() if name not in given]


def with_defaults(xla_flags: str) -> str:
    """``xla_flags`` followed by every default flag it does not name (its own settings kept)."""
    return " ".join([xla_flags.strip(), *missing_flags(xla_flags)]).strip()


def apply() -> None:
    """Adds the default flags to ``os.environ["XLA_FLAGS"]``; after a backend has started this
    can no longer take effect, and a warning says so (where the flag matters: on CPU)."""
    current = os.environ.get("XLA_FLAGS", "")
    missing = missing_flags(current)
    if not missing:
        return
    if _cpu_backend_started():
        warnings.warn(
            "dilemmax was imported after JAX started its CPU backend, so XLA_FLAGS can no longer "
            f"take {' '.join(missing)}; without it some training "
            "programs can stall on CPU (docs/distributed.md). Import dilemmax before creating "
            "arrays, or set XLA_FLAGS yourself",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    os.environ["XLA_FLAGS"] = with_defaults(current)


def _cpu_backend_started() -> bool:
    """Whether JAX has started its backends already, with CPU as the default one. Reads JAX's
    own record without starting anything (a JAX without that record: assumed not started).

    JAX is imported here only when it was imported already: a backend cannot have started
    otherwise, and this module stays free of JAX for the moment it runs in."""
    if "jax" not in sys.modules:
        return False
    import jax
    from jax._src import xla_bridge

    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started is not None and started() and jax.default_backend() == "cpu")
