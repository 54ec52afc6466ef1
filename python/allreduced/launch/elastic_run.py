"""The launcher's elastic loop: starts the first workers, then, every poll, reaps the workers that
exited, asks for the hosts again, stops the workers of hosts that left or were blacklisted, and
starts workers in free slots up to max_np, counting the job's re-formations against the reset
limit, as horovodrun's elastic driver does. ElasticRun runs on the launcher's main thread and owns
the workers; their output is copied by RankGroup's reader threads. Standard library only.

Horovod's rules it keeps (docs/elastic.md says where ours differ):
1. A worker that fails blacklists its host: the host's other workers are stopped and it gets no
   worker until its cooldown ends (SlotTable); a host that discovery no longer lists leaves the
   job the same way, without blacklisting.
2. Each poll that changes the job's membership while it runs (workers failed or stopped, workers
   started) is one reset; the reset after `reset_limit` stops the job with an error naming it.
3. A worker that exits 0 finishes the job: no worker starts after it. Workers started after the
   newest batch that a finishing worker came from may wait for a job that is gone: their
   failures do not count, and those still running FINISH_GRACE_S after the others ended are
   stopped. The exit code is 0 unless a worker of the job failed after that.
4. The workers on this machine are told of workers started and hosts removed at once (Notices,
   read by allreduced.common.launch_notice), as Horovod's driver tells its workers: they
   interrupt at their next commit and, re-registering, wait for the new workers to reach init().
"""
import collections
import math
import os
import shutil
import signal
import tempfile
import time

from allreduced.launch import hosts as hosts_lib
from allreduced.launch.rank_group import RankGroup
from allreduced.launch.remote import REMOTE_GRACE_S

_POLL_S = 0.1
# How long workers started after the finishing generation may outlive its last member.
FINISH_GRACE_S = 10.0

HostError = hosts_lib.HostError


class Notices:
    """The launch's directory of notices to its workers on this machine (the files
    allreduced.common.launch_notice reads): which workers were started while the job ran, and
    which exited. Workers on other machines get none (their daemon's notice is theirs)."""

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="allreduced-launch-")
        self._lines = []
        self._polls = 0

    def env(self, slot, number):
        if not slot.local:
            return {}
        return {"ALLREDUCED_ELASTIC_NOTICE": self.path, "ALLREDUCED_ELASTIC_WORKER": str(number)}

    def added(self, numbers):
        """Workers `numbers` were started while the job ran."""
        self._write("added " + ",".join(str(n) for n in numbers))

    def removed(self, next_number):
        """A host left; the workers numbered below next_number were started before."""
        self._write(f"removed {next_number}")

    def _write(self, line):
        self._lines.append(line)
        tmp = os.path.join(self.path, "hosts.tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(self._lines) + "\n")
        os.replace(tmp, os.path.join(self.path, "hosts"))

    def failed(self, number):
        return os.path.exists(os.path.join(self.path, f"failed.{number}"))

    def polled(self):
        """One more look at the workers done (ranks re-registering wait for two)."""
        self._polls += 1
        tmp = os.path.join(self.path, "polls.tmp")
        with open(tmp, "w") as f:
            f.write(str(self._polls))
        os.replace(tmp, os.path.join(self.path, "polls"))

    def exited(self, number):
        with open(os.path.join(self.path, f"exited.{number}"), "w"):
            pass

    def remove(self):
        shutil.rmtree(self.path, ignore_errors=True)


class _Worker:
    """One started worker: its single-rank RankGroup, its host, its launch number, the job's
    reset count when it started, and why it is being stopped (None: it is not)."""

    def __init__(self, group, host, number, batch):
        self.group, self.host, self.number, self.batch = group, host, number, batch
        self.stopping = None
        self.failed = False  # it said so (launch_notice.failed) before it exited
        self.stop_by = math.inf  # monotonic time after which a stopping worker is killed


class ElasticRun:
    """One elastic job's workers (see the module's rules).

    1. ElasticRun(table, discover, command, ...) holds the SlotTable (hosts already given),
       discover() (Hosts with sockets, or raises HostError), the worker command, its environment,
       RankGroup's start options, log(number, line) for output (number None: the launcher's own)
       and the caller's signal state (cli._Signals).
    2. run(np, max_np) starts np to max_np workers (as many as the hosts hold) and loops until
       none is left; returns the exit code. `workers` holds the running ones at all times, for
       the caller to stop on a signal.
    """

    def __init__(self, table, discover, command, env, start_options, log, signals,
                 interval_s, reset_limit=None):
        self.table, self.discover, self.command = table, discover, command
        self.env, self.start_options, self.log, self.signals = env, start_options, log, signals
        self.interval_s, self.reset_limit = interval_s, reset_limit
        self.workers = []
        self.notices = Notices()
        self.stopped = False  # stop_all(): the job is over, the workers are being stopped
        self.resets = 0
        self.code = 0
        self._number = 0
        self._finished_batch = None  # the newest batch a worker that exited 0 started in
        self._stragglers_since = None

    def run(self, np, max_np):
        try:
            return self._run(np, max_np)
        finally:
            self.notices.remove()

    def _run(self, np, max_np):
        now = time.monotonic()
        # As horovodrun: every free slot up to max_np (np at least), numbered as a plain launch
        # numbers them (each host's LOCAL_SIZE the count the first generation waits for there).
        free = [h for h in self.table.hosts if not self.table.blacklisted(h.name, now)]
        count = max(np, min(max_np, sum(h.slots for h in free)))
        for slot in hosts_lib.assign(free, count):
            self._start(slot)
        asked_at = now
        while self.workers:
            time.sleep(_POLL_S)
            now = time.monotonic()
            changed = self._reap(now)
            if now - asked_at >= self.interval_s:
                asked_at = now
                changed |= self._rediscover(now)
            self._stop_stragglers(now)
            if changed and self._running():
                self._count_reset()
            batch = self._free_batch(now, max_np)
            if batch and (changed or self._count_reset()):
                self._grow(batch)
            for w in self.workers:
                if w.stopping and now > w.stop_by:
                    w.group.kill()
            self.notices.polled()
        return self.code

    def _running(self):
        """The workers still part of the job (running, not being stopped), while it runs."""
        if self._finished_batch is not None or self.stopped:
            return []
        return [w for w in self.workers if w.stopping is None and not w.failed]

    def _count_reset(self):
        """Counts one re-formation; at the limit, stops every worker and returns False."""
        if self.reset_limit is not None and self.resets >= self.reset_limit:
            self.log(None, f"the job would be reset {self.resets + 1} times, over its reset "
                     f"limit of {self.reset_limit} (--reset-limit); stopping every "
                     "worker\n".encode())
            self.stop_all()
            return False
        self.resets += 1
        return True

    def _reap(self, now):
        """Handles the workers that exited or said they failed; returns True if one failed (the
        job re-forms)."""
        failed = False
        for w in self.workers:
            if w.stopping is None and not w.failed and self.notices.failed(w.number):
                w.failed = True  # it exits soon; its host goes now, before the job re-forms
                failed = self._failure(w, "failed", now) or failed
        for w in [w for w in self.workers if not w.group.running()]:
            w.group.wait()
            rc = w.group.procs[0].returncode
            self.workers.remove(w)
            self.table.release(w.host)
            self.notices.exited(w.number)
            if w.stopping is not None:
                continue
            if rc != 0 and self._straggler(w):
                self.log(None, f"worker {w.number} on {w.host} exited with {rc} after the job "
                         "finished without it (ignored)\n".encode())
                continue
            self.code = rc if rc > 0 else (128 - rc if rc < 0 else 0)
            if rc == 0:
                self._finished_batch = max(w.batch, self._finished_batch or 0)
            elif not w.failed:
                failed = self._failure(w, f"exited with {rc}", now) or failed
        return failed

    def _failure(self, w, what, now):
        """Worker w failed: its host is blacklisted and the host's other workers stopped."""
        self.log(None, f"worker {w.number} on {w.host} {what}\n".encode())
        period = self.table.blacklist(w.host, now)
        if period is not None and self._running():
            until = "for good" if period == math.inf else f"for {period:.1f}s"
            self.log(None, f"host {w.host} blacklisted {until}\n".encode())
            for other in self.workers:
                if other.host == w.host and other.stopping is None and other is not w:
                    self._stop(other, "its host was blacklisted", now)
        return True

    def _rediscover(self, now):
        """Asks for the hosts again; stops the workers of hosts no longer listed (True if any)."""
        try:
            self.table.update(self.discover())
        except HostError as e:
            self.log(None, f"host discovery: {e} (keeping the previous hosts)\n".encode())
            return False
        gone = [name for name in self.table.gone()
                if any(w.host == name and w.stopping is None for w in self.workers)]
        for name in gone:
            self.log(None, f"host {name} is no longer available; stopping its workers\n".encode())
            self._stop_host(name, "its host left", now)
        if gone:
            self.notices.removed(self._number)
        return bool(gone)

    def _stop_host(self, name, why, now):
        for w in self.workers:
            if w.host == name and w.stopping is None:
                self._stop(w, why, now)

    def _stop(self, w, why, now):
        w.stopping = why
        w.stop_by = now + REMOTE_GRACE_S + (0 if w.group.slots[0].local else 5)
        w.group.signal(signal.SIGTERM)

    def _straggler(self, w):
        """A worker started after the generation that finished the job (rule 3)."""
        return self._finished_batch is not None and w.batch > self._finished_batch

    def _stop_stragglers(self, now):
        """After a success, once only stragglers are left for FINISH_GRACE_S (the members of the
        finishing generation end together), they are waiting for a job that is gone: stopped."""
        left = [w for w in self.workers if w.stopping is None]
        if not left or not all(self._straggler(w) for w in left):
            self._stragglers_since = None
            return
        if self._stragglers_since is None:
            self._stragglers_since = now
        if now - self._stragglers_since < FINISH_GRACE_S:
            return
        for w in left:
            self.log(None, f"worker {w.number} on {w.host} started after the job's last "
                     "generation, which finished; stopping it\n".encode())
            self._stop(w, "the job finished", now)

    def stop_all(self):
        """SIGTERM to every worker; the loop kills those left after the grace."""
        now = time.monotonic()
        self.code, self.stopped = 1, True
        for w in self.workers:
            if w.stopping is None:
                self._stop(w, "the job stopped", now)

    def _free_batch(self, now, max_np):
        """The free slots to start workers in now: none once the job finished or ended."""
        if not self._running():
            return []
        return self.table.free(now)[:max_np - len(self._running())]

    def _grow(self, batch):
        """Starts a worker in each (Host, local_rank) of `batch`, last in rank order: they join
        the running job at its next re-formation. A host's new workers share one LOCAL_SIZE (its
        workers once they run), which a host new to the job waits for: one re-formation takes
        them all."""
        for h, _ in batch:
            if not h.socket:
                raise HostError(f"host {h.name}: its daemon's socket is not known; give it with "
                                "--socket")
        running = len(self._running())
        size = running + len(batch)
        local_size = collections.Counter(h.name for h, _ in batch)
        for name in local_size:
            local_size[name] += self.table.used[name]
        first = self._number
        for k, (h, local_rank) in enumerate(batch):
            self._start(hosts_lib.Slot(running + k, size, 0, h.name, h.socket, local_rank,
                                       local_size[h.name], h.local))
            self.log(None, f"started worker {self._number - 1} on {h.name}\n".encode())
        # The running workers here interrupt at their next commit and wait for these ones.
        if all(h.local for h, _ in batch):
            self.notices.added(range(first, self._number))

    def _start(self, slot):
        # A signal's handler raises only outside here (signals.starting), so that every started
        # worker is in `workers` to be stopped; signals.check() raises after.
        self.signals.starting = True
        try:
            number = self._number
            env = dict(self.env, **self.notices.env(slot, number))
            group = RankGroup.of_slots([slot], self.command, env=env,
                                       on_line=lambda _r, line: self.log(number, line),
                                       **self.start_options)
            self.table.take(slot.host)
            self.workers.append(_Worker(group, slot.host, number, self.resets))
            self._number += 1
        finally:
            self.signals.starting = False
        self.signals.check()
