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


def pytest_collection_modifyitems(config, items):
    """Test files holding a test marked slow run first, each file's tests still together and in
    their order. pytest-xdist hands out whole files in this order (``--dist loadfile``), so the
    long files start while the short ones fill the gaps after them, and no worker is left
    finishing a two-minute file alone at the end of the run."""
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_files)
