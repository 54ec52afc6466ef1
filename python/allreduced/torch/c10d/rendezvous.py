"""What a c10d process group's ranks agree on through torch's store before they connect to
their daemons: the daemon job's name (rank 0 picks it, so each process group is its own job) and
which ranks share a daemon (their local rank and local size, which the daemon needs)."""
import os
import socket
import uuid

# The client library's default socket ($ALLREDUCED_SOCKET unset): client/config.cc.
DEFAULT_SOCKET = "/run/allreduced/allreduced.sock"
_JOB_KEY = "allreduced/job"


def _daemon_identity():
    """This process's daemon: its machine and local socket (loopback tests run several daemons
    on one machine, so the socket path tells them apart)."""
    return f"{socket.gethostname()}|{os.environ.get('ALLREDUCED_SOCKET', DEFAULT_SOCKET)}"


def job_name(store, rank):
    """The daemon job of this process group: "<$ALLREDUCED_JOB or torch>.c10d.<random>"."""
    if rank == 0:
        base = os.environ.get("ALLREDUCED_JOB") or "torch"
        store.set(_JOB_KEY, f"{base}.c10d.{uuid.uuid4().hex[:12]}")
    return store.get(_JOB_KEY).decode()


def local_placement(store, rank, size):
    """(local rank, local size): this rank's place among the group's ranks on its daemon."""
    store.set(f"allreduced/daemon/{rank}", _daemon_identity())
    daemons = [store.get(f"allreduced/daemon/{r}").decode() for r in range(size)]
    mine = [r for r in range(size) if daemons[r] == daemons[rank]]
    return mine.index(rank), len(mine)
