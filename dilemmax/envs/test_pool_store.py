"""The pool store (pool_store.py): a stored pool reads back bit for bit as the pytree that was
built, its key follows everything it depends on, and a file that is not a pool is built again,
never read, never a crash."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs import pool_store, pools
from dilemmax.envs.open_cleanup import env as open_cleanup_env
from dilemmax.envs.open_cleanup import generator as open_cleanup_generator
from dilemmax.envs.open_harvest import generator as open_harvest_generator
from dilemmax.envs.open_harvest.types import OpenHarvestRule

ITEM = OpenHarvestRule  # a two-field pytree dataclass of the package
LIKE = {"all": pools.Pool(pool_store.skeleton(ITEM)), "seed": 0}


def _pool(seed: int = 0) -> dict:
    """A small pytree of the kinds a builder returns: int32, bool and float32 leaves."""
    rng = np.random.default_rng(seed)
    rule = ITEM(
        pay_perm=jnp.asarray(rng.integers(0, 6, (7, 3)), jnp.int32),
        regrowth_perm=jnp.asarray(rng.random((7, 2)) < 0.5),
    )
    return {"all": pools.Pool(rule), "seed": jnp.float32(seed + 0.25)}


class Builds:
    """A builder that counts its calls."""

    def __init__(self, seed: int = 0):
        self.calls, self.seed = 0, seed

    def __call__(self) -> dict:
        self.calls += 1
        return _pool(self.seed)


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "pools"
    monkeypatch.setenv(pool_store.ENV_VAR, str(folder))
    return folder


def _assert_same(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert isinstance(y, jax.Array) and x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_stored_pool_reads_back_as_built_and_is_built_once(store):
    build = Builds()
    first = pool_store.stored("demo", (1, 0.5), build, LIKE)
    again = pool_store.stored("demo", (1, 0.5), build, LIKE)
    assert build.calls == 1 and len(list(store.glob("*.npz"))) == 1
    _assert_same(_pool(), first)
    _assert_same(first, again)
    assert isinstance(again["all"], pools.Pool) and isinstance(again["all"].items, ITEM)
    assert not list(store.glob("*.tmp")), "no temporary file is left behind"


def test_the_name_and_every_argument_is_its_own_entry(store):
    build = Builds()
    for name, args in [
        ("demo", (1, 0.5)),
        ("demo", (2, 0.5)),
        ("demo", (1, 0.25)),
        ("x", (1, 0.5)),
    ]:
        pool_store.stored(name, args, build, LIKE)
    pool_store.stored("demo", (1, 0.5), build, LIKE)
    assert build.calls == 4 and len(list(store.glob("*.npz"))) == 4


def test_a_decorated_builder_is_one_entry_however_its_arguments_are_spelled(store):
    calls = []

    @pool_store.stored_as(LIKE)
    def build(seed: int, scale: float = 1.0) -> dict:
        calls.append((seed, scale))
        return _pool(seed)

    _assert_same(_pool(3), build(3))
    for same in (build(3, 1.0), build(seed=3), build(3, scale=1.0)):
        _assert_same(_pool(3), same)
    _assert_same(_pool(4), build(4, 2.0))
    assert calls == [(3, 1.0), (4, 2.0)] and len(list(store.glob("*.npz"))) == 2


def test_the_key_follows_the_package_the_versions_and_the_flags(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    (package / "envs").mkdir(parents=True)
    (package / "envs" / "gen.py").write_text("A = 1\n")
    (package / "envs" / "test_gen.py").write_text("B = 1\n")
    monkeypatch.setattr(pool_store, "PACKAGE", package)
    pool_store.package_digest.cache_clear()
    try:
        base = pool_store.entry_key("demo", (1,))
        (package / "envs" / "test_gen.py").write_text("B = 2\n")  # a test: not a dependency
        pool_store.package_digest.cache_clear()
        assert pool_store.entry_key("demo", (1,)) == base
        (package / "envs" / "gen.py").write_text("A = 2\n")  # the generator: a new key
        pool_store.package_digest.cache_clear()
        edited = pool_store.entry_key("demo", (1,))
        assert edited != base
        monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_dump_to=x")
        assert pool_store.entry_key("demo", (1,)) != edited
        monkeypatch.setattr(jax, "__version__", "0.0.0")
        assert pool_store.entry_key("demo", (1,)) not in (base, edited)
    finally:
        pool_store.package_digest.cache_clear()


def test_off_builds_every_time_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(pool_store.ENV_VAR, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    build = Builds()
    pool_store.stored("demo", (1,), build, LIKE)
    pool_store.stored("demo", (1,), build, LIKE)
    assert build.calls == 2 and not any(tmp_path.rglob("*.npz"))


def test_the_default_folder_is_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(pool_store.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pool_store.store_folder() == tmp_path / "dilemmax" / "pools"
    pool_store.stored("demo", (1,), Builds(), LIKE)
    assert len(list((tmp_path / "dilemmax" / "pools").glob("*.npz"))) == 1


def _entry(store: Path) -> Path:
    (path,) = store.glob("*.npz")
    return path


def _bad_files(valid: bytes) -> dict[str, bytes]:
    """Files that are not a pool of LIKE's structure: garbage, truncations, other pools."""
    rng = np.random.default_rng(0)
    bad = {"empty": b"", "garbage": rng.bytes(4096), "text": b"not a pool\n" * 20}
    for cut in sorted(rng.integers(1, len(valid) - 1, 12)):
        bad[f"cut at {cut}"] = valid[:cut]
    return bad


def _npz_bytes(path: Path, **members) -> bytes:
    np.savez(path, **members)
    return path.read_bytes()


def test_a_file_that_is_not_the_pool_is_built_again_and_replaced(store, tmp_path):
    build = Builds()
    pool_store.stored("demo", (1,), build, LIKE)
    path = _entry(store)
    valid = path.read_bytes()
    header = np.frombuffer(b'{"format": 1, "structure": "x", "shapes": [], "dtypes": []}', np.uint8)
    other = tmp_path / "other.npz"
    bad = _bad_files(valid)
    bad["pickled object array"] = _npz_bytes(other, leaf_0=np.array([{"a": 1}], dtype=object))
    bad["another structure"] = _npz_bytes(other, **{"header.json": header})
    for what, content in bad.items():
        path.write_bytes(content)
        with pytest.warns(UserWarning, match=f"pool store: {path} does not read back"):
            result = pool_store.stored("demo", (1,), build, LIKE)
        _assert_same(_pool(), result)
        assert path.read_bytes() == valid, f"{what}: the entry is rebuilt whole"
    assert build.calls == 1 + len(bad)


def test_another_structure_s_file_is_not_read(store):
    pool_store.stored("demo", (1,), Builds(), LIKE)
    # Same name and arguments, but the caller expects another structure (a change the package
    # digest would not see, say an item type from another package): the file is not read.
    other_like = {**LIKE, "more": 0}
    build = lambda: {**_pool(), "more": jnp.int32(7)}
    with pytest.warns(UserWarning, match="another format or structure"):
        result = pool_store.stored("demo", (1,), build, other_like)
    assert int(result["more"]) == 7
    _assert_same(result, pool_store.stored("demo", (1,), build, other_like))


def test_an_array_of_another_shape_is_named(store):
    build = Builds()
    pool_store.stored("demo", (1,), build, LIKE)
    path = _entry(store)
    with np.load(path) as data:
        members = {k.removesuffix(".npy"): data[k] for k in data.files}
    members["leaf_0"] = members["leaf_0"][:3]
    np.savez(path, **members)
    with pytest.warns(UserWarning, match=r"array 0 is int32\[3, 3\], not int32\[7, 3\]"):
        pool_store.stored("demo", (1,), build, LIKE)
    assert build.calls == 2


def test_a_folder_that_cannot_be_written_costs_a_warning_not_the_pool(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(pool_store.ENV_VAR, str(blocker / "pools"))
    with pytest.warns(UserWarning, match="could not write"):
        result = pool_store.stored("demo", (1,), Builds(), LIKE)
    _assert_same(_pool(), result)


def test_the_games_pools_read_back_as_their_builders_build_them(store):
    """The real builders' structures (the ``like`` each passes), with pools cheap to build."""
    cases = [
        (open_cleanup_env._rule_pool, (3, 40, 2, 4, 2), open_cleanup_generator.build_rule_pool),
        (open_harvest_generator.rule_pools, (5, 30, 0.8, 2, False), None),
    ]
    for builder, args, direct in cases:
        builder.cache_clear()  # this process's memo: the store is what is tested
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a structure mismatch would warn
                built, stored = builder(*args), (builder.cache_clear(), builder(*args))[1]
            _assert_same(built, stored)
            if direct is not None:
                _assert_same(direct(*args), stored)
        finally:
            builder.cache_clear()
    assert len(list(store.glob("*.npz"))) == len(cases)
