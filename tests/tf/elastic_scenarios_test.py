"""Horovod's elastic TensorFlow 2 scenarios (docs/elastic.rst and its integration tests) through
our launcher, with Horovod's expectations per logged epoch: start rank, size, host name and
rendezvous count. Two real daemons named localhost and 127.0.0.1 (both this machine, so the
launcher starts their workers directly) form the cluster view; a discovery script, as Horovod's
tests write it, lists the hosts by "epoch" (the number of lines the workers logged so far);
elastic_scenario_worker.py trains real TensorFlow under hvd.elastic.run."""
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
from harness import Cluster, binary  # noqa: E402
from elastic_launch_test import watched_launch  # noqa: E402

PACKAGE_DIR = os.path.join(HERE, "..", "..", "python")
WORKER = os.path.join(HERE, "elastic_scenario_worker.py")


def discovery_script(path, logfile, schedule):
    """A script printing the hosts of schedule [(epoch or None, [host:slots...])] for the epoch
    given by the log file's line count (None: every later epoch)."""
    lines = ["#!/bin/sh", f"epoch=$(cat {logfile} 2>/dev/null | wc -l)"]
    for epoch, hosts in schedule:
        echo = "; ".join(f"echo {h}" for h in hosts)
        lines.append(f"[ $epoch -eq {epoch} ] && {{ {echo}; exit 0; }}" if epoch is not None
                     else f"{echo}; exit 0")
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def cluster():
    c = Cluster(host_timeout_ms=10000)
    c.first = c.add("localhost")
    c.add("127.0.0.1")
    yield c
    c.close()


def run(cluster, tmp_path, schedule=None, hosts=None, np=2, min_np=2, max_np=4, options=(),
        worker_args=()):
    """Runs the scenario; returns (exit code, logged epochs as dicts, launcher output)."""
    logfile = tmp_path / "epochs.log"
    where = (["-H", hosts] if hosts else
             ["--host-discovery-script", discovery_script(tmp_path / "hosts.sh", logfile,
                                                          schedule)])
    worker = [sys.executable, WORKER, "--logfile", str(logfile),
              "--discovery-schedule", json.dumps(schedule or []), *worker_args]
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
               ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"], CUDA_VISIBLE_DEVICES="-1")
    code, stdout, stderr = watched_launch(
        cluster, ["-np", str(np), "--min-np", str(min_np), "--max-np", str(max_np),
                  "--discovery-interval", "0.2", "--daemon", cluster.first.address,
                  "--allreducectl", binary("allreducectl"), *where, *options, *worker], env,
        stall_s=150, limit_s=600)
    lines = logfile.read_text().splitlines() if logfile.exists() else []
    return code, [json.loads(line) for line in lines], stdout + stderr


def expect(results, out, *rows):
    """Each row: (index, start_rank, size, hostname or None, rendezvous or None)."""
    for i, start_rank, size, hostname, rendezvous in rows:
        got = results[i]
        why = f"epoch {i}: {json.dumps(results, indent=1)}\n{out}"
        assert (got["start_rank"], got["size"]) == (start_rank, size), why
        assert hostname is None or got["hostname"] == hostname, why
        assert rendezvous is None or got["rendezvous"] == rendezvous, why


def test_hosts_added_and_removed(cluster, tmp_path):
    # Horovod's first case (2 slots a host): epoch 0 on localhost, a host added for epoch 1
    # (one re-formation that takes both new workers), localhost removed for epoch 2.
    schedule = [(0, ["localhost:2"]), (1, ["localhost:2", "127.0.0.1:2"]),
                (None, ["127.0.0.1:2"])]
    code, results, out = run(cluster, tmp_path, schedule)
    assert code == 0, out
    assert len(results) == 3, (results, out)
    expect(results, out, (0, 0, 2, "localhost", 1), (1, 0, 4, "localhost", 2),
           (2, 2, 2, "127.0.0.1", 3))


@pytest.mark.parametrize("mode", ["exception", "kill"])
def test_single_rank_failure(cluster, tmp_path, mode):
    # Start rank 0 fails at epoch 1: its host (localhost, both slots) is blacklisted, and the job
    # goes on with 127.0.0.1's two workers.
    code, results, out = run(cluster, tmp_path, [(None, ["localhost:2", "127.0.0.1:2"])],
                             worker_args=["--exit-schedule", json.dumps({"(1, 0)": [0]}),
                                          "--exit-mode", mode])
    assert code == 0, out
    assert "host localhost blacklisted for good" in out, out
    assert len(results) == 3, (results, out)
    expect(results, out, (0, 0, 4, None, 1), (1, 2, 2, None, 2), (2, 2, 2, None, 2))


def test_a_slow_survivor_is_waited_for(cluster, tmp_path):
    # Start rank 0 fails at epoch 1; survivor start rank 2 re-initialises 3 s after start rank 3
    # (far past the 0.5 s settle window): the daemon waits for it while it runs, so the job goes
    # on with both, not with start rank 3 alone in a generation below min_np.
    code, results, out = run(cluster, tmp_path, [(None, ["localhost:2", "127.0.0.1:2"])],
                             worker_args=["--exit-schedule", json.dumps({"(1, 0)": [0]}),
                                          "--slow-rejoin", "2:3"])
    assert code == 0, out
    assert len(results) == 3, (results, out)
    expect(results, out, (0, 0, 4, None, 1), (1, 2, 2, None, 2), (2, 2, 2, None, 2))


def test_fault_tolerance_without_scaling(cluster, tmp_path):
    # The same failure with fixed hosts (-H, no discovery script).
    code, results, out = run(cluster, tmp_path, hosts="localhost:2,127.0.0.1:2",
                             worker_args=["--exit-schedule", json.dumps({"(1, 0)": [0]})])
    assert code == 0, out
    assert len(results) == 3, (results, out)
    expect(results, out, (0, 0, 4, None, 1), (1, 2, 2, None, 2), (2, 2, 2, None, 2))


def test_all_ranks_failing_fails_the_job(cluster, tmp_path):
    code, results, out = run(cluster, tmp_path, [(None, ["localhost:2", "127.0.0.1:2"])],
                             worker_args=["--exit-schedule",
                                          json.dumps({"(1, 0)": [0, 1, 2, 3]})])
    assert code != 0, out
    assert len(results) == 1, (results, out)


def test_all_hosts_blacklisted_fails_the_job(cluster, tmp_path):
    code, results, out = run(cluster, tmp_path, [(None, ["localhost:2", "127.0.0.1:2"])],
                             worker_args=["--exit-schedule", json.dumps({"(1, 0)": [0, 2]})])
    assert code != 0, out
    assert "host localhost blacklisted" in out and "host 127.0.0.1 blacklisted" in out, out


def test_reset_limit(cluster, tmp_path):
    # A host added (reset 1), then one removed (reset 2): a limit of 1 stops the job with an
    # error naming it; a limit of 2 lets it finish.
    schedule = [(0, ["localhost:2"]), (1, ["localhost:2", "127.0.0.1:2"]),
                (None, ["127.0.0.1:2"])]
    (tmp_path / "a").mkdir()
    code, results, out = run(cluster, tmp_path / "a", schedule, options=["--reset-limit", "1"])
    assert code != 0, out
    assert "over its reset limit of 1 (--reset-limit)" in out, out
    (tmp_path / "b").mkdir()
    code, results, out = run(cluster, tmp_path / "b", schedule, options=["--reset-limit", "2"])
    assert code == 0, out
    assert len(results) == 3, (results, out)


def test_a_blacklisted_host_is_resurrected_after_its_cooldown(cluster, tmp_path):
    # Start rank 3 fails at epoch 1: 127.0.0.1 is blacklisted (4-8 s: the job re-forms on
    # localhost meanwhile, rendezvous 2); once the cooldown ends, 127.0.0.1 gets workers again
    # and the job grows back to 4 (rendezvous 3). Rank 0 waits after epoch 1 for that update.
    code, results, out = run(
        cluster, tmp_path, [(None, ["localhost:2", "127.0.0.1:2"])],
        options=["--blacklist-cooldown-range", "4", "8"],
        worker_args=["--exit-schedule", json.dumps({"(1, 0)": [3]}), "--epochs", "4",
                     "--wait-after-epochs", "[1]"])
    assert code == 0, out
    assert "host 127.0.0.1 blacklisted for" in out, out
    assert "started worker 4 on 127.0.0.1" in out, out
    expect(results, out, (0, 0, 4, "localhost", 1), (1, 0, 2, "localhost", 2),
           (2, 0, 4, "localhost", None), (3, 0, 4, "localhost", None))
    # Horovod's count is 3 (its driver rendezvouses the host's new slots together). Ours is 3 to
    # 5: 127.0.0.1's daemon does not know how many processes the launcher started there, so when a
    # loaded machine starts them apart it forms with the first (or with the handoff of the
    # generation it ran) and re-forms for one that registers after the coordinator formed that
    # generation (one registering while it is being formed joins it: DESIGN.md "Elastic
    # training"). What must hold: the job grows back to 4 and stays there.
    assert results[2]["rendezvous"] in (3, 4, 5) and results[3] == dict(
        results[2], epoch=3), json.dumps(results) + out
