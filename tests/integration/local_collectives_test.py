"""One daemon, several real client processes (collective_worker, through the real client library):
every collective x reduce op x dtype checked against a reference on every rank and bit-identical
across ranks; 1,000 small tensors a step in different orders; two jobs at once; Horovod-shaped
mismatch errors; Adasum for 2 to 5 ranks against its reference; join; a process killed mid-step; job formation and launcher variables; jobs named
by their launcher when ALLREDUCED_JOB is unset."""
import os
import signal
import time

import pytest

from harness import Cluster, Workers, check_adasum, ctl, lines_with, status_json, wait_until


@pytest.fixture
def daemon():
    cluster = Cluster()
    d = cluster.add("host-a", extra_flags=["--stall_warning_ms=300", "--job_form_timeout_ms=1500"])
    yield d
    cluster.close()


def assert_all_ok(results):
    for rank, (rc, out) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}:\n" + "\n".join(out)
        assert lines_with(out, "DONE"), f"rank {rank}:\n" + "\n".join(out)
        assert not lines_with(out, "MISMATCH"), f"rank {rank}:\n" + "\n".join(out)


def results_by_case(out):
    return dict(line.split()[1:3] for line in lines_with(out, "RESULT"))


def test_every_collective_op_dtype_four_ranks(daemon):
    results = Workers(daemon.socket, "matrix", 4, "matrix").wait()
    assert_all_ok(results)
    per_rank = [results_by_case(out) for _, out in results]
    assert len(per_rank[0]) > 100
    assert all(set(r) == set(per_rank[0]) for r in per_rank)
    # Collectives whose result is the same tensor on every rank: bit-identical everywhere.
    shared = [c for c in per_rank[0]
              if c.split(".")[0] in ("allreduce", "allgather", "broadcast", "scaled", "group",
                                     "barrier")]
    assert len(shared) > 60
    for case in shared:
        assert len({r[case] for r in per_rank}) == 1, case
    topo = [lines_with(out, "TOPOLOGY")[0].split()[1:] for _, out in results]
    assert sorted(t[0] for t in topo) == ["0", "1", "2", "3"]
    assert all(t[1] == "4" and t[3] == "4" and t[4] == "0" and t[5] == "1" for t in topo)


@pytest.mark.parametrize("ranks", [2, 3, 4, 5])
def test_adasum_matches_the_reference_and_is_bit_identical(daemon, ranks):
    check_adasum(Workers(daemon.socket, f"adasum{ranks}", ranks, "adasum").wait())


def test_thousand_small_tensors_in_different_orders(daemon):
    assert_all_ok(Workers(daemon.socket, "many", 4, "many").wait())


def test_two_jobs_at_once_are_isolated(daemon):
    a = Workers(daemon.socket, "job-a", 2, "matrix", seed=1)
    b = Workers(daemon.socket, "job-b", 3, "many", seed=2)
    assert_all_ok(a.wait())
    assert_all_ok(b.wait())


def test_mismatched_shapes_fail_that_tensor_on_every_rank_and_the_job_continues(daemon):
    results = Workers(daemon.socket, "mm", 3, "mismatch").wait()
    assert_all_ok(results)
    for _, out in results:
        error = lines_with(out, "ERROR mismatched")[0]
        assert error.endswith(
            "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2, 3], but "
            "another rank sent a tensor of shape [3, 3]."), error
        assert error.split()[2] == "9"  # FAILED_PRECONDITION


def test_join_ranks_contribute_identity_and_last_rank_is_reported(daemon):
    results = Workers(daemon.socket, "join", 4, "join").wait()
    assert_all_ok(results)
    for _, out in results:
        assert "JOINED last_rank=3" in out


def test_killed_process_fails_the_others_naming_it_and_next_job_works(daemon):
    workers = Workers(daemon.socket, "doomed", 4, "stuck")
    victim = workers.procs[3]  # never submits; the others wait for it
    # Wait until the stall is visible: ranks 0-2 submitted, rank 3 is missing.
    def stalled():
        s = status_json(daemon.address)
        jobs = [j for j in (s or {}).get("jobs", []) if j["name"] == "doomed"]
        return jobs and jobs[0].get("stalled") and jobs[0]
    job = wait_until(stalled, 15, "the stall report")
    assert job["stalled"][0]["name"] == "stuck"
    assert job["stalled"][0]["missing_ranks"] == [3]
    assert job["stalled"][0]["submitted_ranks"] == [0, 1, 2]
    assert "stalled tensor job=doomed tensor=stuck" in daemon.read_log()

    killed_at = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    results = workers.wait(timeout_s=20)
    elapsed = time.monotonic() - killed_at
    for rank, (rc, out) in enumerate(results[:3]):
        error = lines_with(out, "ERROR stuck")
        assert error, f"rank {rank}:\n" + "\n".join(out)
        assert error[0].split()[2] == "10", error  # ABORTED
        assert f"rank 3 (pid {victim.pid}) on host host-a" in error[0], error
    assert elapsed < 3, f"errors arrived {elapsed:.2f}s after the kill"
    # The daemon is still up and serves a new job with the same name.
    assert daemon.proc.poll() is None
    assert_all_ok(Workers(daemon.socket, "doomed", 2, "many").wait())


def test_job_that_never_forms_names_how_many_registered(daemon):
    results = Workers(daemon.socket, "short", 2, "many",
                      env_for_rank=lambda r: {"ALLREDUCED_RANK": str(r),
                                              "ALLREDUCED_SIZE": "3"}).wait(timeout_s=30)
    for rc, out in results:
        assert rc == 3, out
        init = lines_with(out, "INIT_ERROR")[0]
        assert "DEADLINE_EXCEEDED" in init
        assert "2 of 3 ranks registered (ranks 0, 1)" in init


def test_ranks_assigned_without_launcher_ranks(daemon):
    results = Workers(daemon.socket, "noranks", 3, "many",
                      env_for_rank=lambda r: {"ALLREDUCED_SIZE": "3"}).wait()
    assert_all_ok(results)
    ranks = sorted(lines_with(out, "TOPOLOGY")[0].split()[1] for _, out in results)
    assert ranks == ["0", "1", "2"]


@pytest.mark.parametrize("family", [
    lambda r: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
               "OMPI_COMM_WORLD_LOCAL_RANK": str(r), "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
    lambda r: {"PMI_RANK": str(r), "PMI_SIZE": "2"},
    lambda r: {"SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(r)},
    lambda r: {"HOROVOD_RANK": str(r), "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": str(r),
               "HOROVOD_LOCAL_SIZE": "2"},
], ids=["openmpi", "pmi", "slurm", "horovod"])
def test_launcher_environment_families(daemon, family):
    results = Workers(daemon.socket, "launcher", 2, "many", env_for_rank=family).wait()
    assert_all_ok(results)
    for rank, (_, out) in enumerate(results):
        assert lines_with(out, "TOPOLOGY")[0].split()[1:3] == [str(rank), "2"]


# One launch of 2 ranks per launcher family, as the launcher would set its variables: `launch` is
# what tells two launches apart (a Slurm job, an mpirun's PMIx namespace, ...).
LAUNCHES = {
    "slurm": lambda launch, r: ({"SLURM_PROCID": str(r), "SLURM_NTASKS": "2",
                                 "SLURM_LOCALID": str(r), "SLURM_NTASKS_PER_NODE": "2",
                                 "SLURM_JOB_ID": launch, "SLURM_STEP_ID": "0"},
                                f"slurm-{launch}.0"),
    "openmpi": lambda launch, r: ({"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
                                   "OMPI_COMM_WORLD_LOCAL_RANK": str(r),
                                   "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": launch,
                                   "OMPI_MCA_ess_base_jobid": launch}, f"ompi-{launch}"),
    "pmi": lambda launch, r: ({"PMI_RANK": str(r), "PMI_SIZE": "2", "MPI_LOCALRANKID": str(r),
                               "MPI_LOCALNRANKS": "2", "PMI_JOBID": launch}, f"pmi-{launch}"),
    "horovod": lambda launch, r: ({"HOROVOD_RANK": str(r), "HOROVOD_SIZE": "2",
                                   "HOROVOD_LOCAL_RANK": str(r), "HOROVOD_LOCAL_SIZE": "2",
                                   "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
                                   "HOROVOD_GLOO_RENDEZVOUS_PORT": launch},
                                  f"horovod-127.0.0.1-{launch}"),
}


@pytest.mark.parametrize("family", sorted(LAUNCHES))
def test_two_launches_at_once_without_allreduced_job_stay_apart(daemon, family):
    """Two 2-rank launches started together on one daemon, ALLREDUCED_JOB unset: each forms its own
    job, named after its launch. Their inputs come from different seeds, so a rank reducing with a
    rank of the other launch would see wrong results (MISMATCH) or a refused registration."""
    launches = {"4101": 111, "4202": 222}
    workers = {launch: Workers(daemon.socket, None, 2, "many", seed=seed,
                               env_for_rank=lambda r, l=launch: LAUNCHES[family](l, r)[0])
               for launch, seed in launches.items()}
    for launch, w in workers.items():
        results = w.wait()
        assert_all_ok(results)
        name = LAUNCHES[family](launch, 0)[1]
        for rank, (_, out) in enumerate(results):
            assert lines_with(out, "JOB ") == [f"JOB {name}"], out
            assert lines_with(out, "TOPOLOGY")[0].split()[1:3] == [str(rank), "2"]


def test_a_two_rank_launch_with_no_job_identity_is_refused(daemon):
    """Hydra (MPICH's mpiexec) exports no job id: without ALLREDUCED_JOB both ranks are refused
    before registering, with a message naming the launcher and ALLREDUCED_JOB."""
    hydra = lambda r: {"PMI_RANK": str(r), "PMI_SIZE": "2", "PMI_FD": "9",
                       "MPI_LOCALRANKID": str(r), "MPI_LOCALNRANKS": "2"}
    for rank, (rc, out) in enumerate(Workers(daemon.socket, None, 2, "many",
                                             env_for_rank=hydra).wait(timeout_s=30)):
        assert rc == 3, out
        init = lines_with(out, "INIT_ERROR")[0]
        assert init.startswith("INIT_ERROR INVALID_ARGUMENT"), init
        assert f"rank {rank} of 2" in init and "PMI (MPICH/Hydra" in init, init
        assert "set ALLREDUCED_JOB" in init, init
    assert status_json(daemon.address)["jobs"] == []


def test_status_lists_running_job_with_ranks(daemon):
    workers = Workers(daemon.socket, "visible", 2, "stuck")
    try:
        def listed():
            s = status_json(daemon.address)
            jobs = [j for j in (s or {}).get("jobs", []) if j["name"] == "visible"]
            return jobs and jobs[0]["state"] == "running" and jobs[0]
        job = wait_until(listed, 15, "job in status")
        assert job["size"] == 2
        assert job["hosts"] == ["host-a"]
        assert sorted(job["ranks"][0]["ranks"]) == [0, 1]
        table = ctl("--daemon", daemon.address, "status")
        assert "visible" in table.stdout and "host-a:[0,1]" in table.stdout
    finally:
        workers.kill()
