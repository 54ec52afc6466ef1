"""RankGroup: the processes of one launch, one per rank, local or over ssh; the launcher's core,
also used by the repository's tests to start a job's ranks (ctl/launch/ is its C++ twin for
`allreducectl bench`). Methods belong to one thread; output callbacks run on reader threads.
Standard library only.
"""
import os
import signal
import subprocess
import threading
import time

from allreduced.launch import hosts as hosts_lib
from allreduced.launch import remote

# The variables rank_env sets; inherited ones are dropped, so a launch never mixes in another's.
# horovodrun's names ride along (scripts read them to pick a worker's role); the client library
# reads the ALLREDUCED_* ones first, so they never override the daemons' numbering.
HOROVOD_VARIABLES = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                     "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME")
RANK_VARIABLES = ("ALLREDUCED_SOCKET", "ALLREDUCED_JOB", "ALLREDUCED_RANK", "ALLREDUCED_SIZE",
                  "ALLREDUCED_LOCAL_RANK", "ALLREDUCED_LOCAL_SIZE") + HOROVOD_VARIABLES

_POLL_S = 0.05


def rank_env(slot, job=None, give_rank=True):
    """The ALLREDUCED_* variables of one rank, and horovodrun's HOROVOD_* ones (cross rank and
    size where the slot knows them). job=None leaves ALLREDUCED_JOB out (the client library
    then names the job from another launcher's variables); give_rank=False leaves
    ALLREDUCED_RANK out (the daemons number the ranks, the same way; HOROVOD_RANK is then the
    launcher's number for it, as horovodrun's elastic driver gives a worker it starts)."""
    env = {"ALLREDUCED_SOCKET": slot.socket, "ALLREDUCED_SIZE": str(slot.size),
           "ALLREDUCED_LOCAL_RANK": str(slot.local_rank),
           "ALLREDUCED_LOCAL_SIZE": str(slot.local_size),
           "HOROVOD_RANK": str(slot.rank), "HOROVOD_SIZE": str(slot.size),
           "HOROVOD_LOCAL_RANK": str(slot.local_rank),
           "HOROVOD_LOCAL_SIZE": str(slot.local_size), "HOROVOD_HOSTNAME": slot.host}
    if slot.cross_rank is not None:
        env["HOROVOD_CROSS_RANK"] = str(slot.cross_rank)
        env["HOROVOD_CROSS_SIZE"] = str(slot.cross_size)
    if job is not None:
        env["ALLREDUCED_JOB"] = job
    if give_rank:
        env["ALLREDUCED_RANK"] = str(slot.rank)
    return env


class RankGroup:
    """The processes of one launch, one per rank, started at construction.

    1. RankGroup(sockets, np, command, ...) starts np ranks on each daemon socket of this machine
       (hosts.local_slots); RankGroup.of_slots(slots, command, ..., ssh=...) starts any
       hosts.Slot list, a remote slot's rank through ssh and the remote.py wrapper (ssh: a dict
       of remote.ssh_command's options). Each rank runs `command` with this process's
       environment less any inherited RANK_VARIABLES, plus rank_env(slot, job, give_rank) (or
       ALLREDUCED_SOCKET and, in place of the rest, env_for_rank(slot): another launcher's
       variables, say), plus `env` (a dict, or a function of the Slot giving one); a remote rank
       gets that less remote.forwarded_env's exclusions. Its stdout and stderr go to one pipe,
       procs[rank].stdout (str or bytes lines per `text`), read by the caller, or by a thread
       per rank that calls on_line(rank, line) (newline included) from read_lines() or the
       `on_line` argument on. new_session=True gives each local rank (and each ssh) a session
       and process group of its own: a terminal's Ctrl-C then reaches only the launcher, and
       signals go to the rank's whole group.
    2. wait() waits for the ranks: all of them, or up to the first failure, with a deadline.
       ended_at[rank] is the monotonic time the rank's exit was seen.
    3. stop() ends the ranks still running (SIGTERM, then SIGKILL after a grace; a remote rank:
       its ssh's stdin closed, so the wrapper does the same there), kill() at once; both reap.
    """

    def __init__(self, sockets, np, command, **options):
        self._start(hosts_lib.local_slots(sockets, np), command, **options)

    @classmethod
    def of_slots(cls, slots, command, **options):
        group = cls.__new__(cls)
        group._start(slots, command, **options)
        return group

    def _start(self, slots, command, job=None, env=None, env_for_rank=None, give_rank=True,
               text=False, new_session=False, on_line=None, ssh=None):
        self.slots = slots
        self.new_session = new_session
        self.procs = []
        self.ended_at = [None] * len(self.slots)
        self.timed_out = []  # ranks wait() killed at its deadline
        self._readers = {}  # rank: its reader thread
        base = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
        try:
            for slot in self.slots:
                if env_for_rank is None:
                    variables = rank_env(slot, job, give_rank)
                else:
                    variables = dict(env_for_rank(slot), ALLREDUCED_SOCKET=slot.socket)
                full = dict(base)
                full.update(variables)
                full.update((env(slot) if callable(env) else env) or {})
                if slot.local:
                    argv, stdin, proc_env = command, None, full
                else:
                    argv = remote.ssh_command(slot.host, command, remote.forwarded_env(full),
                                              **(ssh or {}))
                    stdin, proc_env = subprocess.PIPE, base  # the pipe the wrapper watches
                self.procs.append(subprocess.Popen(
                    argv, env=proc_env, stdin=stdin, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=text, start_new_session=new_session))
            if on_line is not None:
                self.read_lines(on_line)
        except BaseException:  # a rank that cannot start, or Ctrl-C meanwhile: none is left over
            self.kill()
            raise

    def read_lines(self, on_line, ranks=None):
        """Starts a thread per rank (of `ranks`, default all) that reads the rest of its output,
        calls on_line(rank, line) for each line, and at the end closes the pipe and reaps it."""
        for rank in self._ranks(ranks):
            t = threading.Thread(target=self._read, args=(rank, on_line), daemon=True)
            t.start()
            self._readers[rank] = t

    def _read(self, rank, on_line):
        p = self.procs[rank]
        for line in p.stdout:
            on_line(rank, line)
        p.stdout.close()
        p.wait()
        self._ended(rank)

    def _ended(self, rank):
        if self.ended_at[rank] is None:
            self.ended_at[rank] = time.monotonic()

    def _ranks(self, ranks):
        return range(len(self.procs)) if ranks is None else ranks

    def running(self, ranks=None):
        """The ranks (of `ranks`, default all) that have not exited yet."""
        left = []
        for rank in self._ranks(ranks):
            p = self.procs[rank]
            if p.poll() is None:
                left.append(rank)
                continue
            self._ended(rank)
            if p.stdin is not None and not p.stdin.closed:
                p.stdin.close()  # a remote rank's: its wrapper has exited
        return left

    def wait(self, timeout_s=None, fail_fast=False, ranks=None):
        """Waits until every rank (of `ranks`, default all) has exited; returns the first that
        failed as (rank, returncode), or None. fail_fast: returns at the first failure instead, the
        others still running (stop() them). Ranks still running after timeout_s are killed and
        listed in timed_out."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        failure = None
        while True:
            left = self.running(ranks)
            if failure is None:
                failure = next(((r, self.procs[r].returncode) for r in self._ranks(ranks)
                                if self.procs[r].returncode not in (None, 0)), None)
            if not left or (fail_fast and failure):
                break
            if deadline is not None and time.monotonic() > deadline:
                self.timed_out = left
                self.kill(left)
                break
            time.sleep(_POLL_S)
        if not left:
            self._join_readers(ranks)
        return failure

    def signal(self, signo, ranks=None):
        """Sends `signo` to every rank (of `ranks`, default all) still running: to its process
        group with new_session. A remote rank's SIGTERM closes its ssh's stdin (the wrapper there
        stops the rank's group); any other signal goes to its local ssh process (SIGKILL: the
        wrapper sees the connection drop and stops the group)."""
        for rank in self.running(ranks):
            p = self.procs[rank]
            try:
                if not self.slots[rank].local and signo == signal.SIGTERM:
                    if not p.stdin.closed:
                        p.stdin.close()
                elif self.new_session:
                    os.killpg(p.pid, signo)
                else:
                    p.send_signal(signo)
            except ProcessLookupError:
                pass  # its group is gone; the rank itself stays a zombie until reaped

    def stop(self, grace_s=remote.REMOTE_GRACE_S):
        """SIGTERM to every rank still running, SIGKILL to those left after grace_s (ssh
        processes: a few seconds more, for the remote wrapper's own grace); reaps all."""
        self.signal(signal.SIGTERM)
        margin = 0 if all(s.local for s in self.slots) else 5
        deadline = time.monotonic() + grace_s + margin
        while self.running() and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        self.kill()

    def kill(self, ranks=None):
        """SIGKILL to every rank (of `ranks`, default all) still running; reaps them and closes
        their pipes."""
        self.signal(signal.SIGKILL, ranks)
        for rank in self._ranks(ranks):
            self.procs[rank].wait()
            self._ended(rank)
        self._join_readers(ranks)
        for rank in self._ranks(ranks):
            p = self.procs[rank]
            reader = self._readers.get(rank)
            if reader is None or not reader.is_alive():  # else a process of the rank's holds it
                p.stdout.close()
            if p.stdin is not None and not p.stdin.closed:
                p.stdin.close()

    def _join_readers(self, ranks=None, timeout_s=5):
        for rank in self._ranks(ranks):
            if rank in self._readers:
                self._readers[rank].join(timeout_s)
