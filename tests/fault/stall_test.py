"""Ranks that fall behind: a slow rank (sleeps before submitting) and uneven work (one rank
submits a tensor the others never will). Two daemons, one rank each (rank 0 on h-a, the
coordinator; rank 1 on h-b), so only the coordinator sees the whole picture."""
import re
import signal
import time

import pytest

from fault_util import (SLACK_S, STALL_WARNING_MS, Procs, ctl, make_cluster, run_job,
                        status_json, wait_stalled, wait_until)

SLOW_MS = 2500


def sockets(c):
    return [c.daemons["h-a"].socket, c.daemons["h-b"].socket]


@pytest.fixture
def cluster():
    c = make_cluster(["h-a", "h-b"])
    yield c
    c.close()


@pytest.fixture
def shutdown_cluster():
    c = make_cluster(["h-a", "h-b"], extra_flags=["--stall_shutdown_ms=1000"])
    yield c
    c.close()


def test_slow_rank_is_reported(cluster):
    """Promise: rank 1 sleeping 2.5 s before submitting `slow` is reported once the stall warning
    time (0.3 s) passed: a coordinator log line names the tensor, rank 1 and h-b; `status`
    (JSON and table) lists `slow` with missing rank 1 on h-b and submitted rank 0; without
    stall_shutdown the job is not aborted and both ranks get the right result."""
    procs = Procs(sockets(cluster), "slow", 1, "slow",
                  env={"ARD_SLOW_RANK": "1", "ARD_SLOW_MS": str(SLOW_MS)})
    try:
        job, stalled = wait_stalled(cluster, "h-b", "slow", "slow", missing=[1], timeout_s=SLOW_MS / 1000)
        assert stalled["submitted_ranks"] == [0]
        assert stalled["missing_hosts"] == ["h-b"]
        assert stalled["waiting_s"] >= STALL_WARNING_MS / 1000
        table = ctl("--daemon", cluster.daemons["h-a"].address, "status").stdout
        assert "slow" in table and "h-b" in table, table
        log = cluster.daemons["h-a"].read_log()
        assert re.search(r"stalled tensor job=slow tensor=slow .*missing_ranks=\[1 on h-b\]", log), log
        codes = procs.wait(timeout_s=SLOW_MS / 1000 + 30)
        for i in (0, 1):
            assert codes[i] == 0 and procs.line(i, "RESULT_OK slow"), procs.dump()
    finally:
        procs.kill()


def test_slow_rank_with_stall_shutdown_aborts_job(shutdown_cluster):
    """Promise: with stall_shutdown_ms=1000, rank 1 sleeping 2.5 s makes the coordinator abort
    the job about 1 s after rank 0 submitted (bound: 1 s + slack): rank 0's error is the stall
    report (`stall shutdown: tensor slow ... ranks 1 on h-b`), rank 1's submit fails with the
    same report, both exit; the daemons stay up and a new job runs."""
    c = shutdown_cluster
    procs = Procs(sockets(c), "slowsd", 1, "slow",
                  env={"ARD_SLOW_RANK": "1", "ARD_SLOW_MS": str(SLOW_MS)})
    try:
        procs.wait_line(0, "SUBMITTED slow")
        submitted = time.monotonic()
        procs.wait([0], timeout_s=1 + SLACK_S + 10)
        elapsed = procs.exited_at[0] - submitted
        assert elapsed < 1 + SLACK_S, f"aborted {elapsed:.2f}s after the submit"
        for i in (0, 1):
            error = procs.wait_line(i, "ERROR slow ", timeout_s=SLOW_MS / 1000 + 10)
            assert "stall shutdown: tensor slow" in error and "1 on h-b" in error, error
        procs.wait(timeout_s=10)
    finally:
        procs.kill()
    for d in c.daemons.values():
        assert d.proc.poll() is None, d.read_log()
    run_job(sockets(c), "slowsd")


def test_uneven_work_reports_and_ends(cluster):
    """Promise: both ranks allreduce `common`; rank 1 then submits `extra`, which rank 0 never
    will. While rank 0 lingers (1.5 s) status reports `extra` stalled, missing rank 0 on h-a.
    When rank 0 exits cleanly, rank 1's `extra` fails within a second (+ slack) with an error
    saying rank 0 on h-a ended; nothing hangs: both processes exit, status shows the job failed
    with that reason (no longer running), and a new job of the same name runs."""
    procs = Procs(sockets(cluster), "uneven", 1, "uneven", env={"ARD_LINGER_MS": "1500"})
    try:
        wait_stalled(cluster, "h-a", "uneven", "extra", missing=[0])
        procs.wait([0], timeout_s=15)
        ended = procs.exited_at[0]
        procs.wait([1], timeout_s=1 + SLACK_S + 10)
        error = procs.line(1, "ERROR extra ") or ""
        assert "0 on h-a" in error and "ended" in error, procs.dump()
        assert procs.exited_at[1] - ended < 1 + SLACK_S
        assert procs.line(0, "DONE") and procs.procs[0].returncode == 0, procs.dump(0)
    finally:
        procs.kill()

    def failed():
        s = status_json(cluster.daemons["h-b"].address)
        jobs = [j for j in (s or {}).get("jobs", []) if j["name"] == "uneven"]
        return [(j["state"], "0 on h-a" in j["failure"]) for j in jobs] == [("failed", True)]
    wait_until(failed, 10, "job uneven failed in status")
    run_job(sockets(cluster), "uneven")


def test_uneven_work_daemon_shutdown_does_not_hang(cluster):
    """Promise: with `extra` pending on h-b (rank 1 waits for it, rank 0 lingers), SIGTERM to h-b
    exits its daemon with status 0 within a few seconds (bound 5 s), rank 1 gets an error saying
    the daemon is shutting down, h-b is DOWN ("left the cluster") and h-a keeps running."""
    procs = Procs(sockets(cluster), "unevensd", 1, "uneven", env={"ARD_LINGER_MS": "30000"})
    b = cluster.daemons["h-b"]
    try:
        wait_stalled(cluster, "h-a", "unevensd", "extra", missing=[0])
        b.signal(signal.SIGTERM)
        assert b.wait_exit(timeout_s=5) == 0, b.read_log()
        procs.wait([1], timeout_s=10)
        assert "shutting down" in (procs.line(1, "ERROR extra ") or ""), procs.dump(1)
        s = status_json(cluster.daemons["h-a"].address)
        hb = {h["name"]: h for h in s["hosts"]}["h-b"]
        assert hb["state"] == "DOWN" and hb["down_reason"] == "left the cluster", hb
        assert cluster.daemons["h-a"].proc.poll() is None
    finally:
        procs.kill()
