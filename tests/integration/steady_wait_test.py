"""A steady-state vote delayed for a tensor some of a host's ranks submitted (DESIGN.md "Steady
state without the coordinator", steady_round_partial_wait_us), with real daemons: a job of 2
hosts x 2 ranks allreduces "gated" (cached at once), then host h-1's first rank submits it again
while its second rank is held at a gate; host h-0's ranks then submit, h-0 starts a round, and
h-1, one rank short, waits its bound before it votes (allreduced_job_round_partial_wait*). Only
then the test lets h-1's second rank go: the tensor agrees in a later round and every result is
right. The gates are FIFOs the test opens, so the order holds without any timing."""
import os

from harness import Cluster, lines_with, scrape, status_json, value, wait_until, workers_across

JOB = "gated2x2"


def open_gate(gates, rank):
    """Lets a rank blocked opening its FIFO go (its open returns once a writer opens)."""
    def opened():
        try:
            os.close(os.open(os.path.join(gates, str(rank)), os.O_WRONLY | os.O_NONBLOCK))
            return True
        except OSError:  # ENXIO: the rank is not at its gate yet
            return False
    wait_until(opened, 60, f"rank {rank} at its gate")


def test_a_host_one_rank_short_waits_before_it_votes(tmp_path):
    c = Cluster(heartbeat_ms=100, host_timeout_ms=5000)
    w = None
    try:
        for h in range(2):
            c.add(f"h-{h}", extra_flags=["--metrics_address=127.0.0.1:0"])
        wait_until(lambda: (s := status_json(c.daemons["h-0"].address)) and
                   sum(h["state"] == "UP" for h in s["hosts"]) == 2, 15, "2 hosts UP")
        h1 = c.daemons["h-1"]
        gates = str(tmp_path)
        for rank in (0, 1, 3):  # ranks 2 and 3 run on h-1 (host order, then local rank)
            os.mkfifo(os.path.join(gates, str(rank)))
        w = workers_across([d.socket for d in c.daemons.values()], JOB, 2, "gated",
                           extra_env={"ARD_GATE_DIR": gates})
        out = {rank: [] for rank in range(4)}
        w.group.read_lines(lambda rank, line: out[rank].append(line.rstrip("\n")))
        # Rank 2's second submission: the first step completed everywhere, so the one tensor
        # pending on h-1 is this one, submitted by rank 2 and not by rank 3.
        def of_rank(rank):  # the output of the process the daemons gave `rank`
            for lines in out.values():
                if lines_with(lines, f"TOPOLOGY {rank} "):
                    return lines
            return []
        wait_until(lambda: len(lines_with(of_rank(2), "SUBMITTED gated")) == 2, 60,
                   "rank 2's second submission")
        wait_until(lambda: value(scrape(h1), "allreduced_job_tensors_pending", job=JOB,
                                 host="h-1") == 1, 30, "h-1 holding a partly submitted tensor")
        open_gate(gates, 0)
        open_gate(gates, 1)
        wait_until(lambda: value(scrape(h1), "allreduced_job_round_partial_wait_timeouts_total",
                                 job=JOB, host="h-1"), 60, "h-1's vote waiting in vain")
        open_gate(gates, 3)
        w.group.wait(timeout_s=120)
        for i, p in enumerate(w.group.procs):
            assert p.returncode == 0 and lines_with(out[i], "DONE") and \
                not lines_with(out[i], "MISMATCH"), \
                f"process {i} exited {p.returncode}:\n" + "\n".join(out[i]) + "\n" + c.logs()
        s = scrape(h1)
        assert value(s, "allreduced_job_round_partial_waits_total", job=JOB, host="h-1") >= 1
        assert value(s, "allreduced_job_collectives_total", job=JOB, host="h-1") == 2
        assert value(s, "allreduced_errors_total", kind="job") == 0
    finally:
        if w is not None:
            w.kill()  # ranks still at their gates when a check failed
        c.close()
