"""Which process of a launch this one is, read from the variables the launchers set.

``accelerate launch``, ``torchrun`` and the ``deepspeed`` launcher start one process per device and
give each ``RANK`` (its place among all processes), ``LOCAL_RANK`` (its place on its machine) and
``WORLD_SIZE`` (how many there are); accelerate also says which wrapper the run uses
(``ACCELERATE_USE_FSDP``, ``ACCELERATE_USE_DEEPSPEED``). They are read here, before torch is
imported, so the command line can decide what each process checks, writes and prints without
starting the process group; the Trainer starts it later from the same variables. MPI
launchers (``mpirun``, accelerate's CPU clusters) give the same three facts under their own
names (``PMI_*``, ``OMPI_COMM_WORLD_*``, ``MV2_COMM_WORLD_*``), read where torchrun's are absent,
as accelerate reads them. A plain ``dilemmax finetune ...`` sets none of them: one process, the
main one.
"""

from __future__ import annotations

import os

from dilemmax.errors import UsageError

# What each fact is called by torchrun (first), then by the MPI launchers.
WORLD_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
RANK_VARIABLES = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
LOCAL_VARIABLES = (
    "LOCAL_RANK",
    "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
)
LAUNCH_VARIABLES = WORLD_VARIABLES + RANK_VARIABLES + LOCAL_VARIABLES


def _count(names: tuple[str, ...], default: int) -> int:
    """The first of ``names`` that is set, as an integer, or a one-line error naming it (a stray
    ``RANK=x`` in the shell would otherwise make every process believe it is the main one)."""
    name = next((n for n in names if os.environ.get(n, "") != ""), None)
    if name is None:
        return default
    text = os.environ[name]
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"environment variable {name}={text!r}: expected an integer >= 0")
    return value


def world_size() -> int:
    """How many processes the launch started (1 without a launcher)."""
    return max(_count(WORLD_VARIABLES, 1), 1)


def process_rank() -> int:
    """This process's place among all of them (0: the main process)."""
    return _count(RANK_VARIABLES, 0)


def local_rank() -> int:
    """This process's place on its own machine: the index of the device it trains on."""
    return _count(LOCAL_VARIABLES, 0)


def is_launched() -> bool:
    """Whether this process is one of several (``WORLD_SIZE`` > 1)."""
    return world_size() > 1


def is_main_process() -> bool:
    """The process that writes the run's files and prints its results."""
    return process_rank() == 0


def sharding_wrapper() -> str | None:
    """ "fsdp" or "deepspeed" when accelerate wraps the model in one (it then places and shards
    the weights itself), else None (DDP or one process: the model goes to this process's
    device)."""
    for wrapper in ("fsdp", "deepspeed"):
        if _flag(f"ACCELERATE_USE_{wrapper.upper()}"):
            return wrapper
    return None


def _flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def fsdp_checkpoints_activations() -> bool:
    """Whether the launch's FSDP config checkpoints activations itself (the Trainer's own
    gradient checkpointing must then stay off: the two together are refused)."""
    return sharding_wrapper() == "fsdp" and _flag("FSDP_ACTIVATION_CHECKPOINTING")


def refuse_launch(command: str) -> None:
    """Raises UsageError when a command that runs in one process is started by a launcher: each
    process would repeat the whole job and write the same files."""
    if is_launched():
        raise UsageError(
            f"`dilemmax finetune {command}` runs in one process (WORLD_SIZE={world_size()}); "
            "start only sft, rloo and sft-rloo with accelerate launch"
        )


def main_print(*parts: object) -> None:
    """``print`` on the main process only (the others would repeat the line)."""
    if is_main_process():
        print(*parts)
