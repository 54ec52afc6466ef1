"""Soak (issue 7, item 4): thousands of small allreduces through real worker processes, job after
job, while the daemon's resident memory is sampled from /proc/PID/status. After warm-up it must
stay flat: a leak of even 50 bytes per collective would exceed the slack (72000 collectives)."""
import os

from harness import Cluster, Workers, lines_with, wait_until

STEPS = 3000    # per job; 8 allreduces per step -> 24000 per job
JOBS = 3
SLACK_KIB = 3 * 1024  # allocator noise (arenas, thread caches) stays well below this


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_daemon_memory_stays_flat():
    cluster = Cluster()
    try:
        d = cluster.add("host-soak")
        pid = d.proc.pid
        samples = []  # (job, step, rss KiB)
        idle_fds = fd_count(pid)
        for job in range(JOBS):
            w = Workers(d.socket, f"soak-{job}", 2, "soak", seed=job + 1,
                        extra_env={"ARD_SOAK_STEPS": str(STEPS)})
            # Sample while rank 0 reports its progress.
            for line in w.procs[0].stdout:
                if line.startswith("STEP"):
                    samples.append((job, int(line.split()[1]), rss_kib(pid)))
                if line.startswith(("DONE", "MISMATCH")):
                    break
            rest = w.wait()
            for rc, out in rest[1:]:
                assert rc == 0 and lines_with(out, "DONE"), "\n".join(out)
            assert rest[0][0] == 0, "\n".join(rest[0][1])
            # A finished job leaves no descriptors behind (its sockets, memfds, result arena).
            wait_until(lambda: fd_count(pid) <= idle_fds, 10,
                       f"job {job}'s descriptors to be closed (idle {idle_fds}, now "
                       f"{fd_count(pid)})")
        assert len(samples) == JOBS * (STEPS // 100), samples
        # Warm-up: the first job's first samples (result arena pages, allocator pools).
        warm = max(rss for job, step, rss in samples if job == 0 and step <= 200)
        later = [rss for job, step, rss in samples if job > 0 or step > 200]
        growth = max(later) - warm
        report = ", ".join(f"{j}/{s}:{r}" for j, s, r in samples)
        assert growth <= SLACK_KIB, f"daemon RSS grew by {growth} KiB after warm-up: {report}"
        print(f"daemon RSS KiB (job/step:rss): {report}; growth after warm-up {growth} KiB")
    finally:
        assert d.proc.poll() is None, d.read_log()
        cluster.close()
