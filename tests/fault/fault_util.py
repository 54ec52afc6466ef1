"""Helpers shared by the fault tests: a cluster of daemons with short timeouts, client processes
whose output is read as it comes (so a test can act at a known point of the workload), and checks
on the errors ranks report. Builds on tests/integration/harness.py."""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

import harness  # noqa: E402  (the path above first)
from harness import Cluster, ctl, status_json, wait_until  # noqa: E402,F401

HEARTBEAT_MS = 100
HOST_TIMEOUT_MS = 1000
# Slack on top of a promised bound: process start/exit, the CLI poll, and scheduling on two
# shared vCPUs. Generous, but a real hang (or a 30 s transport timeout) still fails.
SLACK_S = 3.0
STALL_WARNING_MS = 300


def make_cluster(names, extra_flags=()):
    """Daemons `names` (the first is the coordinator), all UP before this returns."""
    c = Cluster(heartbeat_ms=HEARTBEAT_MS, host_timeout_ms=HOST_TIMEOUT_MS)
    for name in names:
        c.add(name, extra_flags=[f"--stall_warning_ms={STALL_WARNING_MS}",
                                 "--job_form_timeout_ms=8000"] + list(extra_flags))
    wait_until(lambda: all_up(c, names), 15, f"hosts {names} UP")
    return c


def all_up(c, names=None, via=None):
    names = list(names or c.daemons)
    s = status_json(c.daemons[via or names[0]].address)
    if not s:
        return False
    hosts = {h["name"]: h for h in s["hosts"]}
    return all(n in hosts and hosts[n]["state"] == "UP" for n in names)


def host_state(c, via, name):
    s = status_json(c.daemons[via].address)
    return s and {h["name"]: h for h in s["hosts"]}.get(name)


class Procs:
    """collective_worker processes forming one job across daemon sockets (`per_host` each; no
    ALLREDUCED_RANK, so the daemons number them: host order, then local rank), with their output
    collected line by line as it comes. Started by allreduced.launch's RankGroup (through
    harness.Workers); procs[i] is process i's Popen, exited_at[i] when its exit was seen."""

    def __init__(self, sockets, job, per_host, mode, env=None, env_for=None):
        self.lines = [[] for _ in range(len(sockets) * per_host)]

        def env_of(slot):
            return dict(env or {}, **(env_for(slot.rank) if env_for else {}))
        self.workers = harness.Workers(None, job, per_host, mode, extra_env=env_of,
                                       sockets=sockets, give_rank=False)
        self.procs = self.workers.procs
        self.exited_at = self.workers.group.ended_at
        self.workers.group.read_lines(lambda i, line: self.lines[i].append(line.rstrip("\n")))

    def wait_line(self, i, prefix, timeout_s=30):
        return wait_until(lambda: next((l for l in self.lines[i] if l.startswith(prefix)), None),
                          timeout_s, f"process {i} to print {prefix!r}:\n" + self.dump(i))

    def line(self, i, prefix):
        return next((l for l in self.lines[i] if l.startswith(prefix)), None)

    def dump(self, i=None):
        which = range(len(self.procs)) if i is None else [i]
        return "\n".join(f"[{j}] {line}" for j in which for line in self.lines[j])

    def wait(self, indices=None, timeout_s=60):
        """Waits for the processes `indices` (all by default) to exit; fails naming the ones
        still running after timeout_s. Returns {index: returncode}."""
        indices = list(range(len(self.procs)) if indices is None else indices)
        deadline = time.monotonic() + timeout_s
        for i in indices:
            try:
                self.procs[i].wait(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:
                raise AssertionError(f"process {i} still running after {timeout_s}s:\n"
                                     + self.dump())
        wait_until(lambda: all(self.exited_at[i] is not None for i in indices), 5,
                   "the output of the exited processes")
        return {i: self.procs[i].returncode for i in indices}

    def kill(self):
        self.workers.kill()


def run_job(sockets, job, per_host=1, steps=3, elems=4096, timeout_s=60):
    """A short job of checked allreduces; asserts every rank completed every step."""
    p = Procs(sockets, job, per_host, "steps", env={"ARD_STEPS": str(steps),
                                                    "ARD_ELEMS": str(elems)})
    try:
        codes = p.wait(timeout_s=timeout_s)
    finally:
        p.kill()
    for i, rc in codes.items():
        assert rc == 0 and p.line(i, f"DONE {steps}"), f"new job {job}, process {i}:\n" + p.dump()


def wait_stalled(c, via, job, tensor, missing=None, timeout_s=15):
    """The job's entry in `status` once it reports `tensor` stalled (missing exactly `missing`
    ranks when given)."""
    def stalled():
        s = status_json(c.daemons[via].address)
        for j in (s or {}).get("jobs", []):
            for t in j.get("stalled", []) if j["name"] == job else []:
                if t["name"] == tensor and (missing is None or t["missing_ranks"] == missing):
                    return j, t
        return None
    return wait_until(stalled, timeout_s, f"a stall report for {job}/{tensor}")


def data_port(daemon):
    """The port of `daemon`'s data listener, from its log."""
    m = re.search(r"data listener started address=\S+ port=(\d+)", daemon.read_log())
    assert m, daemon.read_log()
    return int(m.group(1))


def fd_count(daemon):
    """How many file descriptors `daemon`'s process holds open."""
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))
