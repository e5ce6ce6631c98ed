"""dilemmax: pure-JAX multi-agent social-dilemma environments."""

# First, before anything can start a JAX backend: XLA reads XLA_FLAGS once, at that start.
from dilemmax import xla_defaults

xla_defaults.apply()

from dilemmax import compile_log  # noqa: E402

compile_log.log_to_directory_from_environment()  # DILEMMAX_COMPILE_LOG: count what compiles

from dilemmax.envs import make, registered_envs  # noqa: E402

__version__ = "0.1.0"
__all__ = ["make", "registered_envs"]
