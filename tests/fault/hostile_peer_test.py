"""Hostile or confused cluster peers: gRPC requests (tests/fault/hostile_peer.cc speaks our
protos) with unknown or ended job ids, stale incarnations, absurd sizes, oversize messages, from
a host that is not a member of the cluster or of the job, a Join of another protocol version, or
a second stream stealing a host's job events. Three daemons; a job of two ranks on h-a and h-b (rank 1 never submits, so the job
stays alive while it is probed); h-c is a member outside the job."""
import subprocess

import pytest

from fault_util import (Procs, all_up, harness, host_state, make_cluster, run_job, status_json,
                        wait_stalled)

NAMES = ["h-a", "h-b", "h-c"]


@pytest.fixture(scope="module")
def cluster():
    c = make_cluster(NAMES)
    procs = Procs([c.daemons["h-a"].socket, c.daemons["h-b"].socket], "victim", 1, "stuck")
    job, _ = wait_stalled(c, "h-a", "victim", "stuck", missing=[1])
    c.job_id = str(job["job_id"])
    c.procs = procs
    yield c
    procs.kill()
    c.close()


def peer(c, daemon, *args):
    """Runs hostile_peer against `daemon`; returns its output line split as (KIND, rest)."""
    r = subprocess.run([harness.binary("hostile_peer"), c.daemons[daemon].address] + list(args),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def status_code(line):
    assert line.startswith("STATUS "), line
    return line.split()[2]


def job_alive(c):
    """The probed job still exists and rank 0 is still waiting (no error reached it)."""
    s = status_json(c.daemons["h-a"].address)
    alive = any(j["name"] == "victim" and j["state"] == "running" for j in s["jobs"])
    return alive and c.procs.procs[0].poll() is None and not c.procs.line(0, "ERROR")


# (case id, daemon, hostile_peer arguments with JOB for the live job id, expected code,
#  text the message must contain)
CASES = [
    ("unknown-job-negotiate", "h-a", ["negotiate", "987654321", "h-b"], "NOT_FOUND",
     "unknown or ended job id 987654321"),
    ("unknown-job-watch", "h-a", ["watch", "987654321", "h-b"], "NOT_FOUND",
     "unknown or ended job id 987654321"),
    ("non-member-negotiate", "h-a", ["negotiate", "JOB", "intruder"], "PERMISSION_DENIED",
     "not an UP member of the cluster"),
    ("member-outside-job-negotiate", "h-a", ["negotiate", "JOB", "h-c"], "PERMISSION_DENIED",
     "not part of job victim"),
    ("non-member-watch", "h-a", ["watch", "JOB", "intruder"], "PERMISSION_DENIED",
     "not an UP member of the cluster"),
    ("member-outside-job-watch", "h-a", ["watch", "JOB", "h-c"], "PERMISSION_DENIED",
     "not part of job victim"),
    ("second-watch-stream", "h-a", ["watch", "JOB", "h-b"], "ALREADY_EXISTS",
     "already watching job victim"),
    ("non-member-register", "h-a", ["register", "intruder", "2", "1000"], "PERMISSION_DENIED",
     "not an UP member of the cluster"),
    ("absurd-job-size", "h-a", ["register", "h-c", "2147483647", "1000"], "INVALID_ARGUMENT",
     "size 2147483647"),
    ("absurd-form-timeout", "h-a", ["register", "h-c", "2", "4000000000"], "INVALID_ARGUMENT",
     "timeout_ms 4000000000"),
    ("oversize-message", "h-a", ["negotiate-oversize", "JOB", "h-b"], "RESOURCE_EXHAUSTED", ""),
    ("bad-host-name-join", "h-a", ["join", "bad name!"], "INVALID_ARGUMENT", "invalid host name"),
    ("join-at-a-follower", "h-b", ["join", "h-z"], "FAILED_PRECONDITION", "coordinator"),
    ("other-protocol-version-join", "h-a", ["join", "h-old", "0"], "UNIMPLEMENTED",
     "(host h-old, allreduced ) speaks protocol version 0, the coordinator h-a"),
    ("stale-incarnation-leave", "h-a", ["leave", "h-b", "99"], "OK", ""),
]


@pytest.mark.parametrize("case,daemon,args,code,text", CASES, ids=[c[0] for c in CASES])
def test_hostile_request_rejected(cluster, case, daemon, args, code, text):
    """Promise: each hostile request gets the stated gRPC status code and a message saying why;
    the probed job keeps running (rank 0 still waits, no error), every daemon stays up, and no
    host's state or incarnation changes (a stale Leave is ignored)."""
    line = peer(cluster, daemon, *[cluster.job_id if a == "JOB" else a for a in args])
    assert status_code(line) == code, line
    assert text in line, line
    assert job_alive(cluster), cluster.procs.dump() + cluster.logs()
    for name in NAMES:
        h = host_state(cluster, "h-a", name)
        assert h["state"] == "UP" and h["incarnation"] == 1, h
        assert cluster.daemons[name].proc.poll() is None


def test_stale_heartbeats_are_told_to_rejoin(cluster):
    """Promise: a Heartbeat naming h-b with a stale incarnation from another process gets
    verdict SUPERSEDED (that process must stop), one naming a host that never joined gets
    REJOIN; neither is OK and neither changes anything: h-b stays UP as incarnation 1 and the job
    keeps running."""
    assert peer(cluster, "h-a", "heartbeat", "h-b", "99").startswith("VERDICT SUPERSEDED")
    assert peer(cluster, "h-a", "heartbeat", "intruder", "1").startswith("VERDICT REJOIN")
    assert host_state(cluster, "h-a", "h-b")["incarnation"] == 1
    assert host_state(cluster, "h-a", "intruder") is None
    assert job_alive(cluster)


def test_garbage_metadata_rejected_and_job_aborted_cleanly(cluster):
    """Promise (runs last in this module): a Negotiate for the live job, claiming to be h-b,
    whose tensor names rank 2^30 with 100 dims of 2^40 is refused with INVALID_ARGUMENT; the job
    cannot go on without h-b's tensors, so it is aborted and rank 0 gets an error naming h-b as
    the sender of an invalid request; the ended job's id is then NOT_FOUND (stale); all daemons
    stay up with unchanged incarnations and a new job across all three hosts runs."""
    line = peer(cluster, "h-a", "negotiate-garbage", cluster.job_id, "h-b")
    assert status_code(line) == "INVALID_ARGUMENT" and "rank 1073741824" in line, line
    cluster.procs.wait([0], timeout_s=10)
    error = cluster.procs.line(0, "ERROR stuck ") or ""
    assert "host h-b sent an invalid request" in error, cluster.procs.dump()
    line = peer(cluster, "h-a", "negotiate", cluster.job_id, "h-b")
    assert status_code(line) == "NOT_FOUND", line
    assert all_up(cluster, NAMES)
    for name in NAMES:
        assert host_state(cluster, "h-a", name)["incarnation"] == 1
    cluster.procs.kill()
    run_job([cluster.daemons[n].socket for n in NAMES], "after-hostile")
