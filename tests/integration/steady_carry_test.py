"""Small cached allreduces carried in the steady state's readiness rounds, with real daemons: jobs
of 2 (two ranks each), 3, 4 and 5 hosts (odd counts fold a host into the exchange) run sum,
average, min and max of float32 and int32 tensors of one element (carried) and of 257 elements
(1028 bytes, past the default steady_round_data_max_bytes of 1024: a recursive-doubling
allreduce), and a scaled one, several steps under the same names. Every result matches the
reference (the worker checks) and is bit-identical on every rank; each host's
allreduced_job_round_carried_tensors_total shows that exactly the small ones after the first step
(a cache miss, negotiated by the coordinator) travelled in the rounds. With the setting at 0
nothing is carried."""
import pytest

from harness import Cluster, lines_with, scrape, status_json, value, wait_until, workers_across

STEPS = 4
CARRIED_PER_STEP = 9  # 2 dtypes x 4 ops of one element, and the scaled 3-element case
CASES_PER_STEP = 17


def start(hosts, extra_flags=()):
    c = Cluster(heartbeat_ms=100, host_timeout_ms=5000)
    for h in range(hosts):
        c.add(f"h-{h}", extra_flags=["--metrics_address=127.0.0.1:0", *extra_flags])
    wait_until(lambda: (s := status_json(c.daemons["h-0"].address)) and
               sum(h["state"] == "UP" for h in s["hosts"]) == hosts, 15, f"{hosts} hosts UP")
    return c


def run_job(c, job, per_host):
    daemons = list(c.daemons.values())
    results = workers_across([d.socket for d in daemons], job, per_host, "carried",
                             extra_env={"ARD_CARRIED_STEPS": str(STEPS)}).wait(timeout_s=240)
    for rank, (rc, out) in enumerate(results):
        assert rc == 0 and lines_with(out, "DONE") and not lines_with(out, "MISMATCH"), \
            f"rank {rank} exited {rc}:\n" + "\n".join(out) + "\n" + c.logs()
    per_rank = [dict(line.split()[1:3] for line in lines_with(out, "RESULT")) for _, out in results]
    assert len(per_rank[0]) == CASES_PER_STEP
    for case in per_rank[0]:
        assert len({r[case] for r in per_rank}) == 1, f"{case} differs across ranks"
    return daemons


@pytest.mark.parametrize("hosts,per_host", [(2, 2), (3, 1), (4, 1), (5, 1)])
def test_small_cached_allreduces_travel_in_the_rounds(hosts, per_host):
    c = start(hosts)
    try:
        job = f"carry{hosts}x{per_host}"
        for d in run_job(c, job, per_host):
            s = scrape(d)
            carried = value(s, "allreduced_job_round_carried_tensors_total", job=job, host=d.name)
            assert carried == CARRIED_PER_STEP * (STEPS - 1), f"{d.name} carried {carried}"
            assert value(s, "allreduced_job_collectives_total", job=job,
                         host=d.name) == CASES_PER_STEP * STEPS
            assert value(s, "allreduced_errors_total", kind="job") == 0
    finally:
        c.close()


def test_nothing_is_carried_when_the_setting_is_zero():
    c = start(2, ["--steady_round_data_max_bytes=0"])
    try:
        for d in run_job(c, "nocarry", 1):
            s = scrape(d)
            assert value(s, "allreduced_job_collectives_total", job="nocarry",
                         host=d.name) == CASES_PER_STEP * STEPS
            assert not value(s, "allreduced_job_round_carried_tensors_total", job="nocarry",
                             host=d.name)
    finally:
        c.close()
