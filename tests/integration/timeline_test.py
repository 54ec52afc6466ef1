"""The timeline (docs/operator-guide.md "Timeline") of a known 2-host job (two daemons, two
worker processes each, a soak of 8 tensors per step): recorded by `allreducectl timeline` (no
duration: until SIGINT; --duration) and through allreduced.common.timeline's HOROVOD_TIMELINE path. The Chrome trace
must show every rank of both hosts, each tensor's phases in order (submit wait, negotiation,
queued, local reduce, cross-host transfer, result out), fused groups, and both hosts' clocks."""
import json
import os
import signal
import subprocess

import pytest

from harness import Cluster, binary, lines_with, status_json, wait_until, workers_across

PHASES = ["wait for ranks", "negotiation", "queued", "local reduce", "cross-host transfer",
          "result out"]
CARRIED_PHASES = ["wait for ranks", "negotiation", "queued", "result out"]
STEPS = 20
TENSORS = [f"grad.{i}" for i in range(8)]  # the soak's tensors


@pytest.fixture
def pair():
    c = Cluster(heartbeat_ms=100, host_timeout_ms=30000)
    for name in ("h-a", "h-b"):
        c.add(name)
    wait_until(lambda: (s := status_json(c.daemons["h-a"].address)) and
               sum(h["state"] == "UP" for h in s["hosts"]) == 2, 10, "two hosts UP")
    yield c
    c.close()


def start_cli(cluster, job, path, *extra):
    proc = subprocess.Popen([binary("allreducectl"), "--daemon", cluster.daemons["h-a"].address,
                             "timeline", "--job", job, "-o", path, *extra],
                            stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()
    assert first.startswith("recording job " + job + " on h-a, h-b"), first + proc.stderr.read()
    return proc


def run_job(cluster, job):
    sockets = [cluster.daemons[n].socket for n in ("h-a", "h-b")]
    results = workers_across(sockets, job, 2, "soak",
                             extra_env={"ARD_SOAK_STEPS": str(STEPS)}).wait(timeout_s=120)
    for rank, (rc, out) in enumerate(results):
        assert rc == 0 and lines_with(out, "DONE"), f"rank {rank} exited {rc}:\n" + "\n".join(out)


def check_trace(path, job):
    with open(path) as f:
        trace = json.load(f)
    assert trace["otherData"]["job"] == job
    clocks = trace["otherData"]["hosts"]
    assert set(clocks) == {"h-a", "h-b"}
    assert clocks["h-a"]["clock_offset_us"] == 0  # the coordinator is the reference
    # One machine: the follower's estimate is near zero, within its round-trip bound.
    b = clocks["h-b"]
    assert b["clock_offset_error_us"] >= 0
    assert abs(b["clock_offset_us"]) <= b["clock_offset_error_us"] + 2000, b
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(processes.values()) == ["host h-a", "host h-b"]
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "thread_name"}
    ranks_of = {"host h-a": set(), "host h-b": set()}
    for (pid, tid), name in rows.items():
        if tid != 0:
            ranks_of[processes[pid]].add(int(name.split()[1]))
    assert sorted(ranks_of["host h-a"] | ranks_of["host h-b"]) == [0, 1, 2, 3]
    assert len(ranks_of["host h-a"]) == 2 and len(ranks_of["host h-b"]) == 2
    for pid in processes:
        for rank in ranks_of[processes[pid]]:
            for t in TENSORS:
                assert f"rank {rank} {t}" in rows.values()

    slices = [e for e in events if e["ph"] == "X"]
    by_row = {}
    for e in slices:
        by_row.setdefault((e["pid"], e["tid"]), []).append(e)
    complete = carried_total = 0
    for (pid, tid), row in by_row.items():
        if tid == 0:
            continue
        row.sort(key=lambda e: (e["ts"], PHASES.index(e["name"])))
        # Each submission: the six phases in order, back to back, never overlapping; or, for a
        # small cached tensor whose data the steady state's round carried, wait, negotiation,
        # queued and result out (no reduce or transfer of its own).
        names = [e["name"] for e in row]
        i = submissions = 0
        while i < len(row):
            carried = (len(row) >= i + 4 and row[i + 3]["name"] == "result out" and
                       row[i + 3]["args"].get("carried_in_round") is True)
            expected = CARRIED_PHASES if carried else PHASES
            one = row[i:i + len(expected)]
            assert [e["name"] for e in one] == expected, (rows[(pid, tid)], names)
            for prev, cur in zip(one, one[1:]):
                assert cur["ts"] >= prev["ts"] + prev["dur"] - 1, (prev, cur)
            assert {e["args"]["tensor"] for e in one} == {rows[(pid, tid)].split()[2]}
            assert len({e["args"]["group"] for e in one}) == 1
            carried_total += carried
            complete += 1
            submissions += 1
            i += len(expected)
        assert submissions == STEPS, (rows[(pid, tid)], submissions)
    assert complete == 4 * len(TENSORS) * STEPS
    # The soak's smallest tensors are carried once cached (steady_round_data_max_bytes).
    assert carried_total > 0
    # Fused groups: a row per host; a group holds several tensors and its members say so.
    groups = [e for e in slices if e["tid"] == 0]
    assert {processes[e["pid"]] for e in groups} == {"host h-a", "host h-b"}
    fused = [g for g in groups if len(g["args"]["tensors"]) > 1]
    assert fused, "no fused group in %d groups" % len(groups)
    g = fused[0]
    members = [e for e in slices if e["pid"] == g["pid"] and e["tid"] != 0 and
               e["args"]["group"] == g["args"]["group"]]
    assert {e["args"]["tensor"] for e in members} == set(g["args"]["tensors"])
    assert all(e["args"]["group_size"] == len(g["args"]["tensors"]) for e in members)
    # Waits name ranks: some wait named another rank (the job's ranks never submit in lockstep).
    waits = [e for e in slices if e["name"] in ("wait for ranks", "negotiation")]
    assert all(set(e["args"]["waiting_for"]) <= {0, 1, 2, 3} for e in waits)
    assert any(e["args"]["waiting_for"] for e in waits)


def test_cli_records_a_two_host_job_until_interrupted(pair, tmp_path):
    path = str(tmp_path / "trace.json")
    cli = start_cli(pair, "tl", path)  # armed before the job exists
    run_job(pair, "tl")
    cli.send_signal(signal.SIGINT)
    rest = cli.stderr.read()
    assert cli.wait(timeout=30) == 0, rest
    assert f"wrote {path}: {4 * len(TENSORS) * STEPS} tensor submissions" in rest, rest
    check_trace(path, "tl")


def test_cli_duration_ends_by_itself(pair, tmp_path):
    path = str(tmp_path / "idle.json")
    cli = start_cli(pair, "nothing-runs", path, "--duration", "0.3")
    rest = cli.stderr.read()
    assert cli.wait(timeout=30) == 0, rest
    with open(path) as f:
        trace = json.load(f)
    assert not [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert set(trace["otherData"]["hosts"]) == {"h-a", "h-b"}


def test_horovod_timeline_path(pair, tmp_path, monkeypatch):
    """What allreduced.tensorflow.init() does with HOROVOD_TIMELINE on rank 0 (and only there),
    then stop at exit."""
    from allreduced.common import timeline
    path = str(tmp_path / "hvd.json")
    monkeypatch.setenv("HOROVOD_TIMELINE", path)
    monkeypatch.setenv("ALLREDUCECTL", binary("allreducectl"))
    monkeypatch.setenv("ALLREDUCED_DAEMON", pair.daemons["h-b"].address)  # any host will do
    assert not timeline.start_from_env(1, "hvd")  # not rank 0: nothing
    assert timeline.start_from_env(0, "hvd")
    run_job(pair, "hvd")
    timeline.stop()
    check_trace(path, "hvd")
    assert not os.path.exists(str(tmp_path / "other.json"))


def test_timeline_usage_errors():
    r = subprocess.run([binary("allreducectl"), "timeline", "--job", "j"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 2 and "no -o FILE" in r.stderr
