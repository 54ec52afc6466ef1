"""The TensorFlow plugin on 2 and 4 real processes over one and two daemons: topology, allreduce
(Sum, Average, Max), allgather with different first dimensions, broadcast, broadcast_variables,
an allreduce inside tf.function, its gradient, and a mismatch surfacing as FailedPreconditionError
with Horovod's message."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster, group_outputs  # noqa: E402
from allreduced.launch import RankGroup  # noqa: E402  (harness puts python/ first)

# Four TensorFlow processes on a small machine can starve a daemon's heartbeat thread for a while;
# these tests are about the plugin, not failure detection (tests/fault covers that), so every
# cluster here uses Cluster(host_timeout_ms=10000).

PACKAGE_DIR = os.path.join(HERE, "..", "..", "python")


def run_workers(sockets, per_host, scenario, extra_env=None, launcher=None, daemon=None,
                allreducectl=True):
    """`per_host` tf_worker processes per daemon socket, started by allreduced.launch's RankGroup.
    By default they carry ALLREDUCED_JOB and ALLREDUCED_SIZE/LOCAL_SIZE/LOCAL_RANK (no
    ALLREDUCED_RANK: the daemons number them); `launcher(rank, local_rank, size, per_host)` gives
    another launcher's variables instead, without ALLREDUCED_JOB (the job is named from them).
    `daemon`: an admin address for hvd.start_timeline (allreducectl timeline); allreducectl=False:
    no $ALLREDUCECTL either (the trainer's own environment only).
    Returns (returncode, output) per process; one still running after 180 s is killed."""
    size = len(sockets) * per_host
    env = dict(extra_env or {}, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
               ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"])
    if allreducectl:
        env["ALLREDUCECTL"] = os.environ["ARD_BIN_ALLREDUCECTL"]
    if daemon is not None:
        env["ALLREDUCED_DAEMON"] = daemon
    hook = None
    if launcher is not None:
        hook = lambda s: launcher(s.rank, s.local_rank, s.size, s.local_size)  # noqa: E731
    group = RankGroup(sockets, per_host, [sys.executable, os.path.join(HERE, "tf_worker.py"),
                                          scenario],
                      job=f"tf-{scenario}-{size}", env=env, env_for_rank=hook, give_rank=False,
                      text=True)
    return group_outputs(group, timeout_s=180)


def run_on_two_hosts(scenario, extra_env=None, launcher=None):
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"{scenario}-{i}") for i in range(2)]
        return run_workers([d.socket for d in daemons], 2, scenario, extra_env, launcher)
    finally:
        cluster.close()


@pytest.mark.parametrize("scenario", ["ops", "more_ops", "grouped_objects", "gradients",
                                      "semantics", "sparse", "broadcast_idiom", "graph_mode"])
@pytest.mark.parametrize("hosts,per_host", [(1, 2), (2, 2)], ids=["1x2", "2x2"])
def test_ops(hosts, per_host, scenario):
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"tf-{i}") for i in range(hosts)]
        for rc, out in run_workers([d.socket for d in daemons], per_host, scenario,
                                   daemon=daemons[0].address):
            assert rc == 0 and f"OK {scenario}" in out, out
    finally:
        cluster.close()


def test_a_timeline_that_cannot_start_is_a_warning(tmp_path):
    cluster = Cluster(host_timeout_ms=10000)
    try:
        d = cluster.add("tl-warn")
        results = run_workers([d.socket], 2, "ops", {
            "HOROVOD_TIMELINE": str(tmp_path / "t.json"),
            "ALLREDUCECTL": str(tmp_path / "no-allreducectl")}, allreducectl=False)
        for rc, out in results:
            assert rc == 0 and "OK ops" in out, out
        warned = [out for _, out in results if "training goes on without it" in out]
        assert len(warned) == 1 and "cannot run" in warned[0], results
    finally:
        cluster.close()


@pytest.mark.parametrize("environment", ["given", "trainer's own"])
def test_horovod_timeline_records_the_whole_job(tmp_path, environment):
    """HOROVOD_TIMELINE=path on a 2-host job (2 daemons x 2 TensorFlow ranks): rank 0 records
    every rank of both hosts until exit (docs/operator-guide.md "Timeline"); with allreducectl
    and the daemon's address given, or with nothing but the trainer's environment (PATH without
    allreducectl: rank 0 finds both through its daemon's socket)."""
    path = str(tmp_path / "timeline.json")
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"tl-{i}") for i in range(2)]
        given = environment == "given"
        env = {"HOROVOD_TIMELINE": path}
        if not given:
            env["PATH"] = os.path.dirname(sys.executable) + ":/usr/bin:/bin"
        for rc, out in run_workers([d.socket for d in daemons], 2, "ops", env,
                                   daemon=daemons[1].address if given else None,
                                   allreducectl=given):
            assert rc == 0 and "OK ops" in out, out
    finally:
        cluster.close()
    with open(path) as f:
        trace = json.load(f)
    assert set(trace["otherData"]["hosts"]) == {"tl-0", "tl-1"}
    events = trace["traceEvents"]
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {int(name.split()[1]) for name in rows.values() if name.startswith("rank ")} == \
        {0, 1, 2, 3}
    phases = ["wait for ranks", "negotiation", "queued", "local reduce", "cross-host transfer",
              "result out"]
    by_row = {}
    for e in events:
        if e["ph"] == "X" and e["tid"] != 0:
            by_row.setdefault((e["pid"], e["tid"]), []).append(e)
    assert len(by_row) >= 4 * 3, rows  # every rank, several tensors
    complete = 0
    for key, row in by_row.items():
        row.sort(key=lambda e: (e["ts"], phases.index(e["name"])))
        # Each submission: a prefix of the phases, in order (a tensor the negotiation refused, as
        # the scenario's deliberate mismatch, ends after "negotiation").
        names = [e["name"] for e in row]
        starts = [i for i, n in enumerate(names) if n == "wait for ranks"] + [len(names)]
        assert starts[0] == 0, rows[key]
        for a, b in zip(starts, starts[1:]):
            assert names[a:b] == phases[:b - a], (rows[key], names)
            complete += b - a == 6
    assert complete >= 4 * 3


@pytest.mark.parametrize("hosts,per_host", [(1, 2), (2, 2)], ids=["1x2", "2x2"])
def test_adasum(hosts, per_host):
    """op=hvd.Adasum (allreduce, grouped, DistributedGradientTape) equals Horovod's formula on
    every rank, bit-identical across ranks; an integer tensor and IndexedSlices are refused."""
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"tf-{i}") for i in range(hosts)]
        digests = set()
        for rc, out in run_workers([d.socket for d in daemons], per_host, "adasum"):
            assert rc == 0 and "OK adasum" in out, out
            digests.add(tuple(line[line.index("DIGEST"):] for line in out.splitlines()
                              if "DIGEST" in line))
        assert len(digests) == 1 and len(next(iter(digests))) == 5, digests
    finally:
        cluster.close()


def test_distributed_gradient_tape_matches_single_process_training():
    for rc, out in run_on_two_hosts("tape"):
        assert rc == 0 and "OK tape" in out, out


def test_keras_fit_with_distributed_optimizer_and_callbacks():
    for rc, out in run_on_two_hosts("fit"):
        assert rc == 0 and "OK fit" in out, out


def test_process_sets_spanning_hosts_and_within_one():
    for rc, out in run_on_two_hosts("process_sets"):
        assert rc == 0 and "OK process_sets" in out, out


def open_mpi(rank, local, size, per_host):
    """What mpirun (Open MPI 4.1) sets for one rank, its PMIx namespace included."""
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_host),
            "PMIX_NAMESPACE": "1938292737"}


def test_process_sets_in_a_job_named_by_its_launcher():
    """No ALLREDUCED_JOB: init() names the job from mpirun's PMIx namespace, and the process sets'
    sub-jobs follow that name."""
    for rc, out in run_on_two_hosts("process_sets", launcher=open_mpi):
        assert rc == 0 and "OK process_sets" in out, out


def test_init_refuses_a_multi_rank_launch_that_names_no_job():
    def hydra(rank, local, size, per_host):
        return {"PMI_RANK": str(rank), "PMI_SIZE": str(size), "MPI_LOCALRANKID": str(local),
                "MPI_LOCALNRANKS": str(per_host)}
    cluster = Cluster(host_timeout_ms=10000)
    try:
        d = cluster.add("tf-refused")
        for rc, out in run_workers([d.socket], 2, "ops", launcher=hydra):
            assert rc != 0, out
            assert "allreduced init failed: cannot tell which job" in out, out
            assert "PMI (MPICH/Hydra" in out and "set ALLREDUCED_JOB" in out, out
    finally:
        cluster.close()


def test_python_constants_are_the_client_headers():
    """hvd.Sum ... and ops_library.constants() are the ARD_* values of client/allreduced_client.h,
    every one of them, read from the op library rather than written down again in Python."""
    header = open(os.path.join(HERE, "..", "..", "client", "allreduced_client.h")).read()
    expected = {m.group(1): int(m.group(2))
                for m in re.finditer(r"^\s*(ARD_[A-Z0-9_]+) = (-?\d+),", header, re.M)}
    assert len(expected) > 30 and expected["ARD_SUM"] == 1
    script = ("import json, allreduced.tensorflow as hvd\n"
              "from allreduced.tensorflow.ops_library import constants\n"
              "print(json.dumps([constants(), [hvd.Sum, hvd.Average, hvd.Min, hvd.Max,"
              " hvd.Product]]))")
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
               ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"])
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    constants, reduce_ops = json.loads(r.stdout.strip().splitlines()[-1])
    assert constants == expected
    assert reduce_ops == [expected[f"ARD_{op}"] for op in ("SUM", "AVERAGE", "MIN", "MAX",
                                                            "PRODUCT")]


def test_distributed_optimizer_matches_single_process_training():
    """4 ranks x a quarter batch == 1 process x the whole batch, also with
    backward_passes_per_step=2 (averaged, and summed)."""
    for rc, out in run_on_two_hosts("equivalence"):
        assert rc == 0 and "OK equivalence" in out, out


def test_fit_with_warmup_then_save_and_load_the_wrapped_optimizer(tmp_path):
    for rc, out in run_on_two_hosts("save_load", {"ALLREDUCED_TEST_DIR": str(tmp_path)}):
        assert rc == 0 and "OK save_load" in out, out


def test_sync_batch_norm_partial_tape_and_v1_optimizer():
    for rc, out in run_on_two_hosts("layers"):
        assert rc == 0 and "OK layers" in out, out


def test_a_rank_that_raises_mid_training_fails_the_others_promptly():
    """Rank 1 raises in batch 3 and exits; the other three get a TensorFlow error naming rank 1
    instead of hanging (run_workers kills a worker after 180 s, which fails this test)."""
    outputs = run_on_two_hosts("raise")
    raised = [out for rc, out in outputs if "rank 1 raised on purpose" in out]
    assert len(raised) == 1, outputs
    for rc, out in outputs:
        if out not in raised:
            assert rc == 3 and "ERROR" in out and "rank 1" in out, out


def launch(sockets, np_, command, timeout_s=180):
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
               ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"])
    return subprocess.run([sys.executable, "-m", "allreduced.launch", "--sockets",
                           ",".join(sockets), "-np", str(np_ * len(sockets)), "--"] + command,
                          capture_output=True, text=True, env=env, timeout=timeout_s)


def test_launcher_runs_the_keras_demo_on_two_hosts():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"demo-{i}") for i in range(2)]
        demo = os.path.join(HERE, "..", "..", "tfplugin", "examples", "train_keras.py")
        r = launch([d.socket for d in daemons], 2, [sys.executable, demo])
        assert r.returncode == 0, r.stdout + r.stderr
        assert "[0] epoch 5: loss" in r.stdout
        assert "[0] weights identical on all 4 ranks" in r.stdout
    finally:
        cluster.close()


def test_launcher_fails_fast_when_a_rank_fails():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        d = cluster.add("fail-fast")
        script = ("import os, sys, time\n"
                  "sys.exit(3) if os.environ['ALLREDUCED_RANK'] == '1' else time.sleep(120)")
        start = time.monotonic()
        r = launch([d.socket], 3, [sys.executable, "-c", script], timeout_s=60)
        assert r.returncode == 3, r.stdout + r.stderr
        assert "rank 1 exited with 3" in r.stderr
        assert time.monotonic() - start < 30
    finally:
        cluster.close()
