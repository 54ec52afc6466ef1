"""A job's data connection broken from the outside on real daemons (issue 27): h-b's data port
sits behind a StreamTap (stream_tap.py), through which h-a (host 0 of every job) dials h-b (host
1). The tap closes the connection in the middle of a transfer, or sends h-b bytes after the last
transfer's end; the job must fail on both hosts saying which host it lost or which sent a corrupt
stream, never hang or finish with wrong values, and the daemons must keep serving without
leaking file descriptors."""
import os
import tempfile

import pytest

from fault_util import (HEARTBEAT_MS, HOST_TIMEOUT_MS, SLACK_S, STALL_WARNING_MS, Procs, all_up,
                        fd_count, harness, run_job, wait_until)
from stream_tap import StreamTap

NAMES = ["h-a", "h-b"]
FLAGS = [f"--stall_warning_ms={STALL_WARNING_MS}", "--job_form_timeout_ms=8000"]
MIB = 1 << 20


@pytest.fixture
def tapped():
    """h-a and h-b (behind the tap), a first job run through the tap; yields (cluster, tap,
    the daemons' fd counts when idle, before and after that job)."""
    tap = StreamTap()
    c = harness.Cluster(heartbeat_ms=HEARTBEAT_MS, host_timeout_ms=HOST_TIMEOUT_MS)
    try:
        c.add("h-a", extra_flags=FLAGS)
        c.add("h-b", extra_flags=FLAGS + tap.daemon_flags())
        wait_until(lambda: all_up(c, NAMES), 15, "h-a and h-b UP")
        idle = {n: fd_count(d) for n, d in c.daemons.items()}
        run_job(sockets(c), "warmup")
        assert tap.connections >= 1, "h-a did not dial h-b through the tap:\n" + c.logs()
        # A job's descriptors close shortly after its ranks exit: back to the idle count.
        wait_until(lambda: {n: fd_count(d) for n, d in c.daemons.items()} == idle, 15,
                   f"the daemons' fd counts back to {idle} after a normal job")
        yield c, tap, idle
    finally:
        c.close()
        tap.close()


def sockets(c):
    return [c.daemons[n].socket for n in NAMES]


def check_failed_on_both(procs, c, what):
    """Both ranks exited (no hang) after an ERROR for their allreduce that says `what` happened
    between h-a and h-b (host 0 and host 1, with the names), and neither saw a wrong value."""
    procs.wait(timeout_s=60)
    for i in range(len(NAMES)):
        error = procs.line(i, "ERROR ") or ""
        print(f"rank {i}: {error}")
        assert what in error, f"rank {i}:\n{procs.dump()}\n{c.logs()}"
        assert "host 0" in error and "host 1" in error and "0=h-a, 1=h-b" in error, procs.dump(i)
        assert procs.line(i, "MISMATCH") is None, procs.dump(i)


def check_still_serving(c, tap, fds_before):
    """A second job runs across both daemons (through the tap again), both daemons still run
    and hold the file descriptors they held before the fault."""
    tap.forward()
    run_job(sockets(c), "after-fault")
    for name, d in c.daemons.items():
        assert d.proc.poll() is None, f"{name} exited:\n{d.read_log()}"
        wait_until(lambda: fd_count(d) == fds_before[name], 15,
                   f"{name}'s fd count back to {fds_before[name]} (now {fd_count(d)})")


def test_connection_closed_mid_transfer_fails_the_job_on_both_hosts(tapped):
    """Promise: when h-a's data connection to h-b is closed in the middle of a transfer (3 MiB
    into a job of 1 MiB allreduces), the job fails on both hosts with an error naming the host
    lost (h-a: host 1, h-b: host 0, with the names), both within a few seconds of the cut
    (SLACK_S, not the 30 s progress timeout); the daemons keep serving (a
    second job runs across both) and hold the same number of file descriptors as before."""
    c, tap, fds_before = tapped
    tap.cut_after(3 * MIB + 1001)  # odd: never at a transfer's end
    procs = Procs(sockets(c), "cut", 1, "steps")
    try:
        check_failed_on_both(procs, c, "lost host")
    finally:
        procs.kill()
    assert tap.cuts == 1
    for i in range(len(NAMES)):
        elapsed = procs.exited_at[i] - tap.cut_time
        assert elapsed < SLACK_S, f"rank {i} exited {elapsed:.2f}s after the cut:\n{procs.dump()}"
    check_still_serving(c, tap, fds_before)


def test_bytes_past_a_transfers_end_fail_the_job_on_both_hosts(tapped):
    """Promise: 8 bytes sent to h-b on h-a's data connection after the last transfer ended (both
    ranks stopped between two allreduces) fail the job's next allreduce on both hosts, h-b's
    error saying it received a corrupt stream and naming h-a's host; nothing of the bytes is
    used as data; the daemons keep serving with the same file descriptors as before."""
    c, tap, fds_before = tapped
    gates = tempfile.mkdtemp(prefix="ard-gate.", dir="/tmp")
    for rank in range(len(NAMES)):
        os.mkfifo(os.path.join(gates, str(rank)))
    procs = Procs(sockets(c), "trailing", 1, "gated", env={"ARD_GATE_DIR": gates})
    try:
        for rank in range(len(NAMES)):
            procs.wait_line(rank, "GATED")
        assert tap.inject(b"\x5a" * 8) == 1, "h-a's data connection is not open through the tap"
        for rank in range(len(NAMES)):
            os.close(os.open(os.path.join(gates, str(rank)), os.O_WRONLY))
        check_failed_on_both(procs, c, "host 1 received a corrupt stream from host 0")
    finally:
        procs.kill()
    check_still_serving(c, tap, fds_before)
