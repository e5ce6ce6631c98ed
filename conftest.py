"""Test-session setup shared by tests/ and the games' own tests."""

import os

import jax

# A persistent compilation cache: pytest-xdist workers and repeated test modules compile many of
# the same programs (env steps, pool generators); the second compile of each becomes a disk read.
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    jax.config.update(
        "jax_compilation_cache_dir", os.path.join(os.path.dirname(__file__), ".jax_cache")
    )
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
