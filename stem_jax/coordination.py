"""JAX's coordination service for a multi-process eval, hosted by its own small process.

``jax.distributed.initialize`` starts the coordination service inside process 0. When process 0
dies, every other process's client loses the service, and jaxlib aborts that process (rc 134 and a
C++ stack dump, "Terminating process because the JAX distributed service detected fatal errors"):
the client's error handler is fixed in C++, ``jax.distributed`` offers no way to turn it off, and a
Python ``missed_heartbeat_callback`` through jaxlib's private client crashed with std::bad_cast.

So process 0 starts the service in a detached helper process (:func:`main` of this module,
its own session: a signal to process 0's terminal or group does not reach it) and every eval
process, process 0 included, connects to it as a client (:func:`join`). Killing any eval process
then looks to the others like losing a peer, which recoverable mode keeps to itself.

The helper is one more task of the service (task ``N`` for ``N`` eval processes) so that it can
use the service's own liveness barrier: it waits in ``get_live_nodes`` until every eval process
still alive has called it at exit (:func:`leave`) and any dead one has dropped out after the
heartbeat timeout, waits the same way for the eval processes' disconnection, then shuts the
service down and exits, which releases the port. It exits on its own within one heartbeat timeout
of the last eval process's death too, so it never outlives its job. Its log lines (jaxlib's) are
dropped unless ``$STEM_COORDINATION_LOG`` names a file to append them to.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from stem_jax.errors import StemError

INIT_TIMEOUT = 300  # seconds a process waits for the others to connect (JAX's default)
# `python -m stem_jax.coordination`, also where stem_jax is importable only through this process's sys.path
_HELPER = (f"import sys; sys.path.append({str(Path(__file__).resolve().parent.parent)!r}); "
           "from stem_jax.coordination import main; sys.exit(main(sys.argv[1:]))")


def join(coordinator: str, pid: int, count: int, *, heartbeat: int) -> None:
    """Connect this process to the job's coordination service as ``jax.distributed.initialize`` would.

    Process 0 first starts the service in its helper process (:func:`start_service`); every process
    then connects as a client and fills in ``jax._src.distributed.global_state`` (JAX builds its
    backend from it, and ``jax.distributed.shutdown`` at exit disconnects it). :func:`leave` is
    registered to run at exit, before JAX's own shutdown.

    JAX's preemption sync manager is not started: the processes share no collectives and never
    sync on a preemption. A process whose peers do not all connect within ``INIT_TIMEOUT`` is
    aborted by jaxlib, as with ``jax.distributed.initialize``.

    Raises:
      StemError: JAX's backend is already in use, the job was already joined, the service could
        not start (the port is taken) or refused the connection.
    """
    import atexit

    from jax._src import distributed as jax_distributed
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    if xla_bridge.backends_are_initialized():
        raise StemError("the multi-process eval must join its job before JAX computes anything")
    state = jax_distributed.global_state
    if state.client is not None:
        raise StemError("this process already joined a multi-process job")
    if pid == 0:
        start_service(coordinator, count, heartbeat=heartbeat)
    client = _jax.get_distributed_runtime_client(coordinator, pid, init_timeout=INIT_TIMEOUT, use_compression=True,
                                                 heartbeat_timeout=heartbeat)
    try:
        client.connect()
    except Exception as error:  # noqa: BLE001 - jaxlib raises its own runtime error type
        raise StemError(f"process {pid} could not join the {count}-process job at {coordinator}: "
                        f"{str(error).splitlines()[0]}\n  how to fix: start every process (--process-id 0.."
                        f"{count - 1}) with the same --coordinator and --num-processes within {INIT_TIMEOUT} s; "
                        "process 0 hosts the coordinator") from None
    state.coordinator_address, state.process_id, state.num_processes, state.client = coordinator, pid, count, client
    atexit.register(leave, count)  # atexit is LIFO: runs before JAX's own shutdown, registered at import
    import jax

    # the backend now exchanges the processes' device topologies through the service (as the first JAX
    # call after jax.distributed.initialize would): a process that returned from join has published its own
    if (jax.process_index(), jax.process_count()) != (pid, count):
        raise StemError(f"JAX counts this process as {jax.process_index()} of {jax.process_count()}, "
                        f"not {pid} of {count}")


def leave(count: int) -> None:
    """At exit, wait until every other eval process still alive is done too.

    ``get_live_nodes`` returns once every live task of the service (the eval processes and the
    helper) has called it; a killed process drops out after the heartbeat timeout. The helper then
    stays up until the eval processes have disconnected, so none loses the service before its own
    shutdown call (a process whose service vanished first aborts).
    """
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    if client is None:
        return
    try:
        client.get_live_nodes(list(range(count + 1)))
    except Exception:  # noqa: BLE001 - the service is gone: there is nobody left to wait for
        pass


def start_service(coordinator: str, count: int, *, heartbeat: int) -> subprocess.Popen:
    """Start the coordination service for ``count`` eval processes in a detached helper process.

    Returns once the service listens on the coordinator's port (all addresses, as JAX binds it).

    Raises:
      StemError: the helper could not start the service (the port is taken, most often).
    """
    host, port = coordinator.rsplit(":", 1)
    bind = os.environ.get("JAX_COORDINATOR_BIND_ADDRESS", f"[::]:{port}")
    if _listening(host.strip("[]"), int(port)):  # gRPC binds with SO_REUSEPORT: a second service would share it
        raise StemError(f"something already listens on {coordinator} (the coordination service of a job still "
                        "finishing, or another program)\n  how to fix: choose a free port in --coordinator (the same "
                        "on every process), or wait for the previous job on it to end (at most --heartbeat-timeout "
                        "seconds after its last process)")
    log = os.environ.get("STEM_COORDINATION_LOG")  # the helper's own (jaxlib's) log lines; none by default
    with open(log, "ab") if log else open(os.devnull, "wb") as stderr:
        helper = subprocess.Popen([sys.executable, "-c", _HELPER, "--bind", bind, "--address", coordinator,
                                   "--processes", str(count), "--heartbeat-timeout", str(heartbeat)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                                  start_new_session=True, text=True)
    line = helper.stdout.readline().strip()
    helper.stdout.close()
    if line != "ready":
        helper.wait()
        why = line.removeprefix("error: ") or (f"its process ended (rc {helper.returncode}) before listening, most "
                                               "often because the port is taken")
        raise StemError(f"the coordination service could not start on {bind}: {why}\n  how to fix: choose a free "
                        "port in --coordinator (the same on every process), or wait for the previous job on it to end")
    return helper


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def serve(bind: str, address: str, count: int, heartbeat: int) -> int:
    """The helper's body: host the service for ``count`` eval processes, leave when they are all gone."""
    from jax._src.lib import _jax

    try:
        service = _jax.get_distributed_runtime_service(bind, count + 1, heartbeat_timeout=heartbeat,
                                                       shutdown_timeout=heartbeat, recoverable=True)
    except Exception as error:  # noqa: BLE001 - jaxlib raises its own runtime error type
        print(f"error: {str(error).splitlines()[0]}", flush=True)
        return 1
    print("ready", flush=True)
    sys.stdout.close()
    everyone = list(range(count + 1))
    client = _jax.get_distributed_runtime_client(address, count, init_timeout=INIT_TIMEOUT, use_compression=True,
                                                 heartbeat_timeout=heartbeat)
    try:
        client.connect()
        client.get_live_nodes(everyone)  # every eval process has finished (called leave) or died
        client.get_live_nodes(everyone)  # and has disconnected (or died between leave and its shutdown)
        client.shutdown()
    except Exception:  # noqa: BLE001 - the job never formed (a process did not connect in time)
        pass
    time.sleep(0.5)  # the last disconnections' replies
    service.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stem_jax.coordination",
                                     description="Host JAX's coordination service for a multi-process stem-jax eval "
                                     "(started by process 0; not meant to be run by hand).")
    parser.add_argument("--bind", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--heartbeat-timeout", dest="heartbeat", type=int, required=True)
    args = parser.parse_args(argv)
    return serve(args.bind, args.address, args.processes, args.heartbeat)


if __name__ == "__main__":
    sys.exit(main())
