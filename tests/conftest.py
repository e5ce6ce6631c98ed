import os
import sys

sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    from dilemmax.envs import registry

    # A test-only env exercises the generic machinery without depending on any game.
    if "toy" not in registry.registered_envs():
        registry.register("toy", "toy_env:ToyEnv", "test-only budget game")
