"""Measures how long the ranks on h-a wait for their error when h-b's daemon is SIGKILLed while
a 2x2 job of h-a (coordinator) and h-b sits between two collectives (collective_worker mode
`between`: h-a's ranks wait on "second", h-b's ranks pause). A measurement, not a test:

    bazel build //daemon:allreduced //tests/integration:collective_worker
    ARD_BIN_ALLREDUCED=bazel-bin/daemon/allreduced \\
    ARD_BIN_COLLECTIVE_WORKER=bazel-bin/tests/integration/collective_worker \\
    ARD_BIN_ALLREDUCECTL=bazel-bin/ctl/allreducectl \\
        python3 tests/integration/measure_kill_between.py [--runs 5] [--host_timeout_ms 5000]
"""
import argparse
import statistics
import threading
import time

from harness import Cluster, host_states, wait_until, workers_across


def one_run(host_timeout_ms):
    cluster = Cluster(heartbeat_ms=100, host_timeout_ms=host_timeout_ms)
    try:
        for name in ("h-a", "h-b"):
            cluster.add(name)
        wait_until(lambda: (s := host_states(cluster.daemons["h-a"].address)) and
                   all(h["state"] == "UP" for h in s.values()) and len(s) == 2, 10, "both UP")
        workers = workers_across([cluster.daemons[n].socket for n in ("h-a", "h-b")],
                                 "between", 2, "between")
        lines = [[] for _ in workers.procs]  # (monotonic time, line)

        def read(i):
            for line in workers.procs[i].stdout:
                lines[i].append((time.monotonic(), line.rstrip("\n")))
        for i in range(len(workers.procs)):
            threading.Thread(target=read, args=(i,), daemon=True).start()

        def seen(i, prefix):
            return any(l.startswith(prefix) for _, l in lines[i])
        wait_until(lambda: seen(0, "SUBMITTED second") and seen(1, "SUBMITTED second") and
                   seen(2, "PAUSED") and seen(3, "PAUSED"), 30, "the job between collectives")
        killed = time.monotonic()
        cluster.daemons["h-b"].proc.kill()
        cluster.daemons["h-b"].proc.wait()
        errors = [wait_until(lambda i=i: next(((t, l) for t, l in lines[i]
                                               if l.startswith("ERROR second")), None),
                             host_timeout_ms / 1000 + 30, f"rank {i}'s error") for i in (0, 1)]
        workers.kill()
        return max(t for t, _ in errors) - killed, errors[0][1]
    finally:
        cluster.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--host_timeout_ms", type=int, default=5000)
    args = parser.parse_args()
    times = []
    for run in range(args.runs):
        elapsed, error = one_run(args.host_timeout_ms)
        times.append(elapsed)
        print(f"run {run}: {elapsed:.3f} s  {error}", flush=True)
    print(f"host_timeout_ms={args.host_timeout_ms} runs={args.runs} "
          f"median={statistics.median(times):.3f} s max={max(times):.3f} s")


if __name__ == "__main__":
    main()
