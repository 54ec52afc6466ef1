"""bench/scale_sim at small scale: a real coordinator daemon against 20 simulated hosts.

Checks the report's fields, not timings: the job formed with one rank per host, every host saw
every tensor of every step committed, and a run that cannot receive the coordinator's events
fails with the reason in its report.
"""
import json
import os
import subprocess


def run_sim(*flags):
    proc = subprocess.run(
        [os.environ["ARD_BIN_SCALE_SIM"], "--allreduced=" + os.environ["ARD_BIN_ALLREDUCED"],
         "--phase_timeout_s=60"] + list(flags),
        capture_output=True, text=True, timeout=240)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_small_cluster_report():
    rc, report, stderr = run_sim("--hosts=20", "--tensors=10", "--steps=5")
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


def test_receive_limit_failure_is_reported():
    # A 0 MiB receive limit: every reply is refused (as a follower's JobEvent is when it exceeds
    # gRPC's 4 MiB default); the run stops at the first and says why.
    rc, report, _ = run_sim("--hosts=3", "--tensors=2", "--steps=1", "--max_receive_mb=0")
    assert rc == 1
    assert "larger than max" in report["error"], report["error"]
    assert "steady_steps_per_s" not in report
