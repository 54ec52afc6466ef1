"""Prometheus metrics and the gRPC health service of real daemons: two hosts run a job, then each
daemon's /metrics is scraped and parsed with prometheus_client's own parser (what a Prometheus
server would read); the per-job counters outlive the job, and are dropped after the retention.
The health service (grpc.health.v1) answers SERVING on a member and NOT_SERVING on a follower
that cannot join. With steady_state on, the hosts' Negotiate calls show that cached tensors never
reach the coordinator."""
import socket

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness import Cluster, Daemon, scrape, status_json, value, wait_until, workers_across

RETENTION_S = 2  # h-b's metrics_job_retention_s; h-a keeps the default (an hour)


def health(address, service=""):
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


@pytest.fixture
def pair():
    # The coordinator path, whatever the default: test_scrape counts a Negotiate call per step.
    c = Cluster(heartbeat_ms=100, host_timeout_ms=2000)
    c.add("h-a", extra_flags=["--metrics_address=127.0.0.1:0", "--steady_state=false"])
    c.add("h-b", extra_flags=["--metrics_address=127.0.0.1:0", "--steady_state=false",
                              f"--metrics_job_retention_s={RETENTION_S}"])

    def both_up():
        s = status_json(c.daemons["h-a"].address)
        return s and sum(h["state"] == "UP" for h in s["hosts"]) == 2
    wait_until(both_up, 10, "two hosts UP")
    yield c
    c.close()


def test_scrape_after_a_two_host_job(pair):
    a, b = pair.daemons["h-a"], pair.daemons["h-b"]
    results = workers_across([a.socket, b.socket], "mjob", 1, "latency").wait(timeout_s=120)
    for rc, out in results:
        assert rc == 0, "\n".join(out)
    for d in (a, b):  # the daemons drop the ended job just after its ranks leave
        wait_until(lambda: value(scrape(d), "allreduced_jobs", state="running") == 0, 10,
                   f"{d.name} to drop the job")

    sa, sb = scrape(a), scrape(b)
    # Cluster view (coordinator): both hosts UP; the epoch moved when h-b joined.
    assert value(sa, "allreduced_hosts", state="UP") == 2
    assert value(sa, "allreduced_hosts", state="DOWN") == 0
    assert value(sa, "allreduced_membership_epoch") >= 2
    assert value(sa, "allreduced_cluster_joined") == 1
    assert value(sb, "allreduced_cluster_joined") == 1
    for host, s in (("h-a", sa), ("h-b", sb)):
        # The job ended, but its counters remain (history): 2000 one-float allreduces.
        assert value(s, "allreduced_job_collectives_total", job="mjob", host=host) >= 2000
        assert value(s, "allreduced_job_reduced_bytes_total", job="mjob", host=host) >= 8000
        assert value(s, "allreduced_job_tensors_pending", job="mjob", host=host) is None
        cycles = value(s, "allreduced_job_negotiation_cycles_total", job="mjob", host=host)
        hits = value(s, "allreduced_job_response_cache_hits_total", job="mjob", host=host)
        misses = value(s, "allreduced_job_response_cache_misses_total", job="mjob", host=host)
        assert cycles >= 2000 and hits >= 1990 and misses >= 1
        ratio = value(s, "allreduced_job_response_cache_hit_ratio", job="mjob", host=host)
        assert ratio == pytest.approx(hits / (hits + misses))
        # 4-byte allreduces: every one in the smallest size bucket.
        count = value(s, "allreduced_collective_latency_seconds_count", op="allreduce",
                      size_le="4KiB")
        assert count >= 2000
        assert value(s, "allreduced_collective_latency_seconds_bucket", op="allreduce",
                     size_le="4KiB", le="+Inf") == count
        assert value(s, "allreduced_collective_latency_seconds_count", op="allreduce",
                     size_le="64KiB") is None
        assert value(s, "allreduced_collective_latency_seconds_sum", op="allreduce",
                     size_le="4KiB") > 0
        assert value(s, "allreduced_data_plane_sent_bytes_total") > 0
        assert value(s, "allreduced_data_plane_received_bytes_total") > 0
        assert value(s, "allreduced_errors_total", kind="job") == 0
        assert value(s, "allreduced_client_connections") == 0
        assert value(s, "process_resident_memory_bytes") > 1 << 20
        assert value(s, "process_open_fds") > 0
        assert value(s, "process_start_time_seconds") > 0
        assert value(s, "process_cpu_seconds_total") > 0

    # h-b drops the ended job's series after its retention; h-a (an hour) keeps them.
    wait_until(lambda: value(scrape(b), "allreduced_job_collectives_total", job="mjob",
                             host="h-b") is None, 10 + RETENTION_S, "h-b to drop mjob's series")
    assert value(scrape(a), "allreduced_job_collectives_total", job="mjob", host="h-a") >= 2000


@pytest.fixture
def steady_pair():
    c = Cluster(heartbeat_ms=100, host_timeout_ms=2000)
    for name in ("h-a", "h-b"):
        c.add(name, extra_flags=["--metrics_address=127.0.0.1:0", "--steady_state=true"])
    wait_until(lambda: (s := status_json(c.daemons["h-a"].address)) and
               sum(h["state"] == "UP" for h in s["hosts"]) == 2, 10, "two hosts UP")
    yield c
    c.close()


@pytest.mark.parametrize("per_host", [1, 2])
def test_steady_state_asks_the_coordinator_only_about_new_tensors(steady_pair, per_host):
    """2000 allreduces of one tensor across two hosts with steady_state on: the first is a cache
    miss negotiated by the coordinator; the other 1999 are agreed between the hosts, so each host
    makes a handful of Negotiate calls (allreduced_job_negotiation_cycles_total counts them), not
    one per allreduce as without it (test_scrape_after_a_two_host_job)."""
    a, b = steady_pair.daemons["h-a"], steady_pair.daemons["h-b"]
    job = f"steady{per_host}"
    results = workers_across([a.socket, b.socket], job, per_host, "latency").wait(timeout_s=120)
    for rc, out in results:
        assert rc == 0, "\n".join(out)
    for d in (a, b):
        s = scrape(d)
        assert value(s, "allreduced_job_collectives_total", job=job, host=d.name) >= 2000
        cycles = value(s, "allreduced_job_negotiation_cycles_total", job=job, host=d.name)
        assert 1 <= cycles <= 3, f"{d.name} made {cycles} Negotiate calls with tensors"
        assert value(s, "allreduced_job_response_cache_misses_total", job=job, host=d.name) == 1
        assert value(s, "allreduced_errors_total", kind="job") == 0


def serving(address):
    return health(address) == health_pb2.HealthCheckResponse.SERVING


def test_health_service_follows_membership(pair):
    for name in ("h-a", "h-b"):
        wait_until(lambda: serving(pair.daemons[name].address), 5, f"{name} SERVING")
    # A follower whose coordinator does not answer is up (it answers) but not a member.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{unused.getsockname()[1]}"
        lonely = Daemon(pair.workdir, "h-c", coordinator=dead, heartbeat_ms=100,
                        host_timeout_ms=2000)
        pair.daemons["h-c"] = lonely
        lonely.start()
        assert health(lonely.address) == health_pb2.HealthCheckResponse.NOT_SERVING
        # ... yet alive: the liveness name answers SERVING (a restart would not help it join).
        assert health(lonely.address, "liveness") == health_pb2.HealthCheckResponse.SERVING
    # The coordinator stops: h-b loses contact and stops serving after its host timeout.
    pair.daemons["h-a"].kill()
    wait_until(lambda: health(pair.daemons["h-b"].address)
               == health_pb2.HealthCheckResponse.NOT_SERVING, 15, "h-b to report NOT_SERVING")


def test_metrics_are_off_by_default():
    c = Cluster()
    try:
        d = c.add("h-a")
        assert "metrics serving" not in d.read_log()
        wait_until(lambda: serving(d.address), 5, "h-a SERVING")
    finally:
        c.close()
