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

import errno
import os
import re
import socket
import sys
import threading
import time
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
        init_timeout: seconds to wait for every process to connect (a process other than 0
            first waits this long for the coordinator to listen).
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
        check_coordinator(cluster)  # a process other than 0 says it waits before its own wait
        kwargs = dict(
            coordinator_address=cluster.coordinator,
            num_processes=cluster.num_processes,
            process_id=cluster.process_id,
        )
    if cluster.process_id in (None, 0):
        _say_waiting(cluster)
    # JAX aborts the process (a C++ check failure blaming "another task") when the run is not
    # complete after its timeout; this says first, in one line, who is missing.
    missing = threading.Timer(cluster.init_timeout, _say_missing, (cluster,))
    missing.daemon = True
    missing.start()
    try:
        jax.distributed.initialize(
            **kwargs,
            initialization_timeout=cluster.init_timeout + _JAX_GRACE,
            heartbeat_timeout_seconds=cluster.heartbeat_timeout,
            # A process that finished waits this long for the others at exit.
            shutdown_timeout_seconds=max(cluster.heartbeat_timeout, 10),
        )
    except (RuntimeError, ValueError) as err:  # XlaRuntimeError is a RuntimeError
        where = cluster.coordinator or "the coordinator JAX detected"
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise UsageError(f"cannot join the distributed run at {where}: {first}") from None
    finally:
        missing.cancel()
    return True


_JAX_GRACE = 10  # seconds JAX waits past init_timeout, so that _say_missing speaks first
EXIT_MISSING = 2  # a process ended because the run never assembled (a usage error)


def _who(cluster: Cluster, one_of: str = "one of ") -> tuple[str, str]:
    """(this process, the others) as messages name them: ``process 1 of 3``, ``processes
    0..2`` (``one of processes 0..2`` with ``one_of``)."""
    n, me = cluster.num_processes, cluster.process_id
    if n is None or me is None:
        return "this process", "processes JAX detected"
    ids = [i for i in range(n) if i != me]
    others = f"process {ids[0]}" if len(ids) == 1 else f"{one_of}processes {ids[0]}..{ids[-1]}"
    return f"process {me} of {n}", others


def _say_waiting(cluster: Cluster) -> None:
    """One stderr line, before any wait: whom this process waits for, where and how long (a
    missing peer is named only when ``init_timeout`` runs out, minutes later)."""
    who, others = _who(cluster, one_of="")
    where = cluster.coordinator or "the detected coordinator"
    if cluster.process_id not in (None, 0):
        others = "process 0 (the coordinator) and the others"
        if cluster.num_processes == 2:
            others = "process 0 (the coordinator)"
    sys.stderr.write(
        f"dilemmax train: {who}: waiting up to {cluster.init_timeout} s for {others} at "
        f"{where} (--init-timeout)\n"
    )
    sys.stderr.flush()


def _say_missing(cluster: Cluster) -> None:
    """Ends this process with one line when the run has not assembled in ``init_timeout``."""
    who, others = _who(cluster)
    sys.stderr.write(
        f"dilemmax train: error: {who}: {others} did not join the run at "
        f"{cluster.coordinator or 'the detected coordinator'} within {cluster.init_timeout} s; "
        "start every process with the same --coordinator and --num-processes, or raise "
        "--init-timeout\n"
    )
    sys.stderr.flush()
    os._exit(EXIT_MISSING)


def check_coordinator(cluster: Cluster) -> None:
    """What JAX would fail on without a word, checked first (:class:`UsageError`, one line):
    process 0 needs the coordinator's port free on this machine (JAX's service cannot bind a
    port another program holds, and jaxlib 0.10.2 then crashes with a segmentation fault); every
    other process waits, at most ``init_timeout`` seconds, for process 0 to listen there (JAX
    would abort after that time with a message about another task dying)."""
    host, port = _split_address(cluster.coordinator)
    who = f"process {cluster.process_id} of {cluster.num_processes}"
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        where = f"--coordinator {cluster.coordinator}"
        raise UsageError(f"{where}: unknown host {host!r} ({err})") from None
    if cluster.process_id == 0:
        reason = _cannot_bind(port)
        if reason:
            raise UsageError(
                f"--coordinator {cluster.coordinator}: {who} serves the coordination service on "
                f"port {port} of this machine, but {reason}; choose a free port (the same on "
                "every process)"
            )
        return
    _say_waiting(cluster)
    if not _wait_for_listener(host, port, cluster.init_timeout):
        raise UsageError(
            f"{who}: process 0 (the coordinator) is missing: nothing listened at "
            f"{cluster.coordinator} within {cluster.init_timeout} s; start process 0 with "
            "--process-id 0 and the same --coordinator, or raise --init-timeout"
        )


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _cannot_bind(port: int) -> str | None:
    """Why a server could not listen on ``port`` of every interface (None: it could). Binds the
    way JAX's service does (``[::]:port``, IPv4 too), allowing ports that only closed
    connections still wait on, and lets go at once."""
    attempts = [(socket.AF_INET6, ("::", port)), (socket.AF_INET, ("0.0.0.0", port))]
    for family, address in attempts:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this machine: IPv4 decides
            continue
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            try:
                sock.bind(address)
                sock.listen(1)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return "another program listens on that port"
                if err.errno == errno.EACCES:
                    return "this user may not listen on that port"
                if family == socket.AF_INET6 and err.errno == errno.EADDRNOTAVAIL:
                    continue
                return f"it cannot be bound ({err.strerror or err})"
        return None
    return None


def _wait_for_listener(host: str, port: int, timeout: float) -> bool:
    """Whether something accepts TCP connections at ``host:port`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(left, 2.0))):
                return True
        except OSError:
            if left <= 0:
                return False
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


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
