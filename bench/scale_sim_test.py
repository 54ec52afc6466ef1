"""bench/scale_sim at small scale: a real coordinator daemon against 8 to 20 simulated hosts.

Checks the report's fields, not timings: the job formed with one rank per host, every host saw
every tensor committed; in the coordinator-free steady state (readiness rounds over the hosts'
real data-plane mesh) every cached tensor is agreed in one round per step, the coordinator hears
nothing, and the mesh connections and data-plane messages are exactly what the hypercube
algorithms imply (computed here from DESIGN.md "Data plane", independently of the C++); and a run
that cannot receive the coordinator's events fails with the reason in its report.
"""
import json
import os
import subprocess

import pytest


def run_sim(*flags):
    proc = subprocess.run(
        [os.environ["ARD_BIN_SCALE_SIM"], "--allreduced=" + os.environ["ARD_BIN_ALLREDUCED"],
         "--phase_timeout_s=60"] + list(flags),
        capture_output=True, text=True, timeout=240)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def power_of_two_floor(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def mesh_peers(i, n):
    """Ring neighbours, hypercube partners below p, the fold partner (DESIGN.md "Data plane")."""
    p = power_of_two_floor(n)
    peers = {(i + 1) % n, (i - 1) % n}
    if i < p:
        peers |= {i ^ bit for bit in (1 << k for k in range(p.bit_length() - 1))}
        if i + p < n:
            peers.add(i + p)
    else:
        peers.add(i - p)
    peers.discard(i)
    return peers


def messages(i, n, both_ways_fold):
    """(sent, received) by host i in one recursive doubling over n hosts: hosts p..n-1 fold into
    i - p (an exchange both ways in a readiness round, CombineInPlace; a send in an allreduce),
    log2 p exchanges with i XOR 2^k, then the result goes back to the folded host."""
    p = power_of_two_floor(n)
    log2p = p.bit_length() - 1
    if i >= p:
        return 1, 2 if both_ways_fold else 1
    if i + p < n:
        return log2p + 2 if both_ways_fold else log2p + 1, log2p + 1
    return log2p, log2p


def test_coordinator_steady_report():
    # The daemon with steady_state off: every step's cached ids go through the coordinator.
    rc, report, stderr = run_sim("--hosts=20", "--tensors=10", "--steps=5",
                                 "--steady=coordinator")
    assert rc == 0, (report, stderr)
    assert "error" not in report
    assert report["hosts"] == 20 and report["tensors"] == 10 and report["steps"] == 5
    assert report["job_size"] == 20
    assert report["layout_hosts"] == 20
    # First step plus 5 steady steps of 10 tensors, on every host.
    assert report["expected_committed_per_host"] == 60
    assert report["min_committed_per_host"] == 60
    for key in ("join_s", "formation_s", "first_step_s", "steady_s", "steady_steps_per_s"):
        assert report[key] > 0, key
    assert report["coordinator_cpu_ms_per_step"] >= 0
    # Each host sends one Negotiate per step and hears at least one JobEvent back.
    assert report["sent_per_host_per_step"] == 1
    assert report["messages_per_host_per_step"] >= 2
    assert report["steady_slowest_step_s"] <= report["steady_s"]
    assert report["largest_event_bytes"] > 0


def check_rounds(hosts, tensors, steps):
    # The report prints 6 significant digits: per-host means compare within that.
    rc, report, stderr = run_sim("--hosts=%d" % hosts, "--tensors=%d" % tensors,
                                 "--steps=%d" % steps, "--idle_ms=100")
    assert rc == 0, (report, stderr)
    assert "error" not in report
    assert report["steady_mode"] == "rounds"
    assert report["job_size"] == hosts and report["layout_hosts"] == hosts
    # The mesh: O(log n) connections per host, exactly the hypercube rule's.
    peers = [len(mesh_peers(i, hosts)) for i in range(hosts)]
    assert report["mesh_connections_max"] == max(peers)
    assert report["mesh_connections_per_host"] == pytest.approx(sum(peers) / hosts, rel=1e-5)
    # The first step goes through the coordinator; a round releases it on every host.
    assert report["min_committed_per_host"] == tensors
    assert report["expected_committed_per_host"] == tensors
    assert report["first_step_allreduces_per_host"] >= 1
    # Steady state: one round per step agrees every tensor; the coordinator hears nothing.
    assert report["rounds_per_host_per_step"] == 1
    assert report["agreed_per_host_per_step"] == tensors
    assert report["allreduces_per_host_per_step"] == 1  # 4-byte tensors: one fused buffer
    assert report["to_coordinator_tensors"] == 0
    assert report["messages_per_host_per_step"] == 0
    assert report["sent_per_host_per_step"] == 0
    assert report["steady_messages"] == 0
    # Data-plane messages: one readiness round (CombineInPlace) and one allreduce (recursive
    # doubling) per step.
    rounds = [messages(i, hosts, True) for i in range(hosts)]
    allreduce = [messages(i, hosts, False) for i in range(hosts)]
    assert report["round_messages_sent_per_step"] == sum(s for s, _ in rounds)
    assert report["allreduce_messages_sent_per_step"] == sum(s for s, _ in allreduce)
    assert report["data_sent_max_per_host_per_step"] == max(
        r[0] + a[0] for r, a in zip(rounds, allreduce))
    total = sum(r[0] + r[1] + a[0] + a[1] for r, a in zip(rounds, allreduce))
    assert report["data_messages_per_host_per_step"] == pytest.approx(total / hosts, rel=1e-5)
    # A vote: 6 header words and two bit words per 64 slots; the allreduce: 4 bytes per tensor;
    # every message also carries the data plane's 8-byte checksum.
    vote_bytes = (6 + 2 * ((tensors + 63) // 64)) * 8 + 8
    sent_bytes = sum(r[0] * vote_bytes + a[0] * (4 * tensors + 8)
                     for r, a in zip(rounds, allreduce))
    assert report["data_bytes_sent_per_host_per_step"] == pytest.approx(
        sent_bytes / hosts, rel=1e-5)
    log2p = power_of_two_floor(hosts).bit_length() - 1
    assert report["critical_path_hops_per_step"] == 2 * (
        log2p + (0 if hosts == power_of_two_floor(hosts) else 2))
    assert report["steady_slowest_step_s"] <= report["steady_s"]


def test_rounds_power_of_two_hosts():
    check_rounds(hosts=8, tensors=40, steps=4)


def test_rounds_folded_hosts():
    # 12 = 8 + 4 folded hosts; 70 tensors: the votes' bit vectors take two words.
    check_rounds(hosts=12, tensors=70, steps=3)


def test_receive_limit_failure_is_reported():
    # A 0 MiB receive limit: every reply is refused (as a follower's JobEvent is when it exceeds
    # gRPC's 4 MiB default); the run stops at the first and says why.
    rc, report, _ = run_sim("--hosts=3", "--tensors=2", "--steps=1", "--max_receive_mb=0")
    assert rc == 1
    assert "larger than max" in report["error"], report["error"]
    assert "steady_steps_per_s" not in report
