"""dilemmax: pure-JAX multi-agent social-dilemma environments."""

from dilemmax.envs import make, registered_envs

__version__ = "0.1.0"
__all__ = ["make", "registered_envs"]
