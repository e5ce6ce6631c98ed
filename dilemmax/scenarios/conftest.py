import functools

import pytest

from dilemmax.scenarios.registry import SETS


@functools.cache
def _built(set_name: str):
    return SETS[set_name].build()


@pytest.fixture(scope="session")
def built():
    """set name -> its env, each registered set built once per test session."""
    return _built
