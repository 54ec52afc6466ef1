"""Helpers shared by the fault tests: a cluster of daemons with short timeouts, client processes
whose output is read as it comes (so a test can act at a known point of the workload), and checks
on the errors ranks report. Builds on tests/integration/harness.py."""
import os
import sys
import threading
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
    """collective_worker processes forming one job across daemon sockets (`per_host` each; ranks
    by host order, then local rank), with their output collected line by line as it comes."""

    def __init__(self, sockets, job, per_host, mode, env=None, env_for=None):
        import subprocess
        size = len(sockets) * per_host
        self.procs, self.lines, self.exited_at = [], [], []
        for sock in sockets:
            for local in range(per_host):
                e = dict(os.environ, ALLREDUCED_SOCKET=sock, ALLREDUCED_JOB=job,
                         ALLREDUCED_SIZE=str(size), ALLREDUCED_LOCAL_SIZE=str(per_host),
                         ALLREDUCED_LOCAL_RANK=str(local))
                e.update(env or {})
                if env_for:
                    e.update(env_for(len(self.procs)))
                p = subprocess.Popen([harness.binary("collective_worker"), mode], env=e,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                self.procs.append(p)
                self.lines.append([])
                self.exited_at.append(None)
        self.threads = [threading.Thread(target=self._read, args=(i,), daemon=True)
                        for i in range(len(self.procs))]
        for t in self.threads:
            t.start()

    def _read(self, i):
        for line in self.procs[i].stdout:
            self.lines[i].append(line.rstrip("\n"))
        self.procs[i].wait()
        self.exited_at[i] = time.monotonic()

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
        for i in indices:
            self.threads[i].join(5)
        return {i: self.procs[i].returncode for i in indices}

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


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
