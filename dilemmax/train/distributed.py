"""One training run over many processes: joining the cluster, who writes, agreeing.

Every process of a multi-host run executes the same program on the same global arrays (JAX's
multi-controller model): :func:`join` connects it to the others through ``jax.distributed``
before anything touches a device, either from explicit ``--coordinator host:port
--num-processes N --process-id I`` or from what JAX reads off the cluster itself (SLURM's
``srun``, Open MPI, a Cloud TPU pod slice). After that ``jax.devices()`` lists every process's
devices, the training mesh spans them all and each process holds the envs of its own devices.

Files are written once, by process 0 (:func:`is_primary`): config, metrics, curves, the run
folder's lock; orbax checkpoints are written by every process, each its own shards. Decisions
that could differ between processes (a folder check, a damaged checkpoint) go through
:func:`agree`, so that all of them continue or all stop. A process that dies makes the others
stop too: the coordination service misses its heartbeats for ``heartbeat_timeout`` seconds and
terminates every other process with JAX's message "Terminating process because the JAX
distributed service detected fatal errors ... another task died", so a run never hangs on a
dead peer.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import jax
import numpy as np
from jax.experimental import multihost_utils

from dilemmax.errors import UsageError

_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]{1,253}):(\d{1,5})$")


@dataclass(frozen=True)
class Cluster:
    """How this process joins a run of several (all None: one process, or detected).

    Attributes:
        coordinator: "host:port" where process 0 serves the coordination service.
        num_processes: the number of processes of the run.
        process_id: this process's index, 0 .. num_processes - 1.
        mode: "auto" (join when a cluster launcher started several tasks, or when the three
            fields above are given), "on" (always join; JAX detects what is not given), "off".
        heartbeat_timeout: seconds without a peer's heartbeat before the run is stopped.
        init_timeout: seconds to wait for every process to connect.
    """

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    mode: str = "auto"
    heartbeat_timeout: int = 100
    init_timeout: int = 300

    def explicit(self) -> bool:
        return self.coordinator is not None

    def check(self) -> None:
        """Refuses a partial or out-of-range explicit setting, naming the option."""
        if self.coordinator is not None:
            match = _ADDRESS.match(self.coordinator)
            if match is None or not 0 < int(match.group(2)) < 65536:
                shown = repr(self.coordinator)[:80]
                raise UsageError(f"--coordinator {shown}: expected host:port (port 1-65535)")
        given = [self.coordinator, self.num_processes, self.process_id]
        if any(v is not None for v in given) and any(v is None for v in given):
            raise UsageError(
                "--coordinator, --num-processes and --process-id go together (give all three, "
                "or none to let JAX read SLURM / Open MPI / Cloud TPU)"
            )
        if self.coordinator is not None and not 0 <= self.process_id < self.num_processes:
            raise UsageError(
                f"--process-id {self.process_id} is not in 0..{self.num_processes - 1} "
                f"(--num-processes {self.num_processes})"
            )
        if self.mode == "off" and self.explicit():
            raise UsageError("--distributed off contradicts --coordinator")

    def wanted(self) -> bool:
        """Whether this process should join a cluster."""
        if self.mode == "off":
            return False
        return self.mode == "on" or self.explicit() or launched_as_many()


def launched_as_many() -> bool:
    """Whether a cluster launcher started this process as one task of several: SLURM (srun with
    more than one task), Open MPI, or a Cloud TPU pod slice of more than one host."""
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS")
    if tasks and tasks.isdigit() and int(tasks) > 1:
        return True
    size = os.environ.get("OMPI_COMM_WORLD_SIZE", "")
    if size.isdigit() and int(size) > 1:
        return True
    return "," in os.environ.get("TPU_WORKER_HOSTNAMES", "")


def join(cluster: Cluster) -> bool:
    """Connects this process to the others (before any JAX computation); True when it did.

    Raises :class:`UsageError` when the coordinator cannot be reached in ``init_timeout``
    seconds or JAX finds no cluster to read the missing values from."""
    cluster.check()
    if not cluster.wanted() or jax.distributed.is_initialized():
        return False
    kwargs = {}
    if cluster.explicit():
        kwargs = dict(
            coordinator_address=cluster.coordinator,
            num_processes=cluster.num_processes,
            process_id=cluster.process_id,
        )
    try:
        jax.distributed.initialize(
            **kwargs,
            initialization_timeout=cluster.init_timeout,
            heartbeat_timeout_seconds=cluster.heartbeat_timeout,
            # A process that finished waits this long for the others at exit.
            shutdown_timeout_seconds=max(cluster.heartbeat_timeout, 10),
        )
    except (RuntimeError, ValueError) as err:  # XlaRuntimeError is a RuntimeError
        where = cluster.coordinator or "the coordinator JAX detected"
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise UsageError(f"cannot join the distributed run at {where}: {first}") from None
    return True


def is_primary() -> bool:
    """Whether this process writes the run's files (process 0)."""
    return jax.process_index() == 0


def agree(flag: bool) -> bool:
    """True on every process when ``flag`` is true on every process (one process: ``flag``)."""
    if jax.process_count() == 1:
        return bool(flag)
    flags = multihost_utils.process_allgather(np.asarray([bool(flag)], np.int32))
    return bool(np.all(flags))


def describe() -> str:
    """'process i of n (d of D devices)' for the start line."""
    return (
        f"process {jax.process_index()} of {jax.process_count()} "
        f"({jax.local_device_count()} of {jax.device_count()} devices)"
    )
