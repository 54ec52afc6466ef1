"""A daemon SIGKILLed or frozen (SIGSTOP) while its job runs collectives, in a job of three ranks
on three daemons (h-a coordinates; the victim is h-c, which runs rank 2)."""
import signal
import time

import pytest

from fault_util import (HOST_TIMEOUT_MS, SLACK_S, Procs, all_up, host_state, make_cluster,
                        run_job, wait_until)

NAMES = ["h-a", "h-b", "h-c"]


@pytest.fixture
def cluster():
    c = make_cluster(NAMES)
    yield c
    c.close()


def sockets(c):
    return [c.daemons[n].socket for n in NAMES]


def start_steps(c, job):
    procs = Procs(sockets(c), job, 1, "steps")
    for i in range(3):
        procs.wait_line(i, "STEPPING")
    return procs


def check_survivors_name(procs, host, since, bound_s):
    """Ranks 0 and 1 (on h-a and h-b) exit with an error for their current step naming `host`,
    within bound_s (+ slack) of `since`, and never with a wrong result."""
    procs.wait([0, 1], timeout_s=bound_s + SLACK_S + 10)
    for i in (0, 1):
        error = procs.line(i, "ERROR step ")
        assert error and host in error, f"rank {i}:\n" + procs.dump()
        assert procs.procs[i].returncode == 0, procs.dump(i)
        elapsed = procs.exited_at[i] - since
        assert elapsed < bound_s + SLACK_S, f"rank {i} errored {elapsed:.2f}s after the fault"


def test_daemon_killed_during_collective(cluster):
    """Promise: SIGKILL of h-c's daemon while all ranks run 1 MiB allreduces fails the ranks on
    h-a and h-b with an error naming h-c within the host timeout (1 s + slack); the rank on h-c
    gets an error (its daemon is gone) instead of hanging; h-c is DOWN in status; restarted, it
    rejoins as incarnation 2 and a new job across all three hosts runs."""
    procs = start_steps(cluster, "dk")
    victim = cluster.daemons["h-c"]
    try:
        killed = time.monotonic()
        victim.proc.kill()
        victim.proc.wait()
        check_survivors_name(procs, "h-c", killed, HOST_TIMEOUT_MS / 1000)
        procs.wait([2], timeout_s=10)
        assert "lost connection to allreduced daemon" in (procs.line(2, "ERROR step ") or ""), \
            procs.dump(2)
    finally:
        procs.kill()
    wait_until(lambda: (host_state(cluster, "h-a", "h-c") or {}).get("state") == "DOWN", 10,
               "h-c DOWN")
    victim.start()
    wait_until(lambda: all_up(cluster, NAMES), 15, "h-c UP again")
    assert host_state(cluster, "h-a", "h-c")["incarnation"] == 2
    run_job(sockets(cluster), "dk")


def test_daemon_frozen_then_resumed(cluster):
    """Promise: SIGSTOP of h-c's daemon while all ranks run allreduces (silence, no crash) fails
    the ranks on h-a and h-b naming h-c within the host timeout (1 s + slack) and marks h-c DOWN.
    After SIGCONT the stale daemon does not corrupt anything: its own rank gets an error (no
    hang, no result), it rejoins as a new incarnation, the other daemons keep running, and a new
    job across all three hosts runs with correct results."""
    procs = start_steps(cluster, "ds")
    victim = cluster.daemons["h-c"]
    try:
        stopped = time.monotonic()
        victim.signal(signal.SIGSTOP)
        check_survivors_name(procs, "h-c", stopped, HOST_TIMEOUT_MS / 1000)
        down = wait_until(lambda: (s := host_state(cluster, "h-a", "h-c")) and
                          s["state"] == "DOWN" and s, 10, "h-c DOWN")
        assert "missed heartbeats" in down["down_reason"]
        victim.signal(signal.SIGCONT)
        procs.wait([2], timeout_s=HOST_TIMEOUT_MS / 1000 + SLACK_S + 10)
        error = procs.line(2, "ERROR step ") or ""
        assert "h-c" in error and procs.procs[2].returncode == 0, procs.dump(2)
    finally:
        victim.signal(signal.SIGCONT)
        procs.kill()
    up = wait_until(lambda: (s := host_state(cluster, "h-a", "h-c")) and s["state"] == "UP" and s,
                    15, "h-c UP again")
    assert up["incarnation"] == 2
    for d in cluster.daemons.values():
        assert d.proc.poll() is None, f"{d.name} exited:\n" + d.read_log()
    run_job(sockets(cluster), "ds")
    run_job(sockets(cluster), "ds2", steps=2, elems=262144)


def test_coordinator_killed_during_collective(cluster):
    """Promise: SIGKILL of the coordinator's daemon (h-a) while all ranks run allreduces fails
    the ranks on h-b and h-c within the host timeout (1 s + slack): their data plane loses h-a,
    or they give up on the silent coordinator; nobody hangs or gets a wrong result. Restarted on
    its old port, the coordinator is rejoined by both followers and a new job across all three
    hosts runs."""
    procs = start_steps(cluster, "ck")
    victim = cluster.daemons["h-a"]
    port = victim.port
    try:
        killed = time.monotonic()
        victim.proc.kill()
        victim.proc.wait()
        procs.wait(timeout_s=HOST_TIMEOUT_MS / 1000 + SLACK_S + 10)
        for i in (1, 2):
            assert procs.line(i, "ERROR step ") and procs.procs[i].returncode == 0, procs.dump()
            elapsed = procs.exited_at[i] - killed
            assert elapsed < HOST_TIMEOUT_MS / 1000 + SLACK_S, f"rank {i}: {elapsed:.2f}s"
        assert "lost connection to allreduced daemon" in (procs.line(0, "ERROR step ") or "")
    finally:
        procs.kill()
    victim.flags = [f if not f.startswith("--cluster_address")
                    else f"--cluster_address=127.0.0.1:{port}" for f in victim.flags]
    victim.start()
    wait_until(lambda: all_up(cluster, NAMES), 15, "h-b and h-c rejoin the restarted coordinator")
    for d in cluster.daemons.values():
        assert d.proc.poll() is None, f"{d.name} exited:\n" + d.read_log()
    run_job(sockets(cluster), "ck")
