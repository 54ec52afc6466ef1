"""A small local launcher: starts --np processes per daemon socket with the rank variables the
client library reads, prefixes every output line with the process's rank, and fails fast (stops
the others, exits with the failing process's code) when one process fails. Ctrl-C (or SIGTERM)
stops every process.

    python -m allreduced.launch --sockets /run/a.sock,/run/b.sock --np 2 [--job NAME] -- CMD ...

Ranks are host-major (socket i, local rank l -> rank i * np + l). On a real cluster use your
launcher instead (`mpirun -np N -npernode K python train.py`, `srun ...`): the client library reads
OMPI_COMM_WORLD_*, PMI_*, SLURM_* and HOROVOD_* variables itself and names the job after the launch
(ALLREDUCED_JOB overrides; MPICH's mpiexec needs it); each node's daemon listens on
/run/allreduced/allreduced.sock.

RankGroup is the launcher's core, also used by the repository's tests to start a job's ranks;
client/launch/ (C++) is its twin for `allreducectl bench`. Standard library only.
"""
import argparse
import collections
import os
import signal
import subprocess
import sys
import threading
import time

# The variables rank_env sets; inherited ones are dropped, so a launch never mixes in another's.
RANK_VARIABLES = ("ALLREDUCED_SOCKET", "ALLREDUCED_JOB", "ALLREDUCED_RANK", "ALLREDUCED_SIZE",
                  "ALLREDUCED_LOCAL_RANK", "ALLREDUCED_LOCAL_SIZE")

# Where one rank of a launch runs: `socket` is its daemon's (the socket_index-th given).
Slot = collections.namedtuple("Slot", "rank size socket_index socket local_rank local_size")

_POLL_S = 0.05


def slots(sockets, np):
    """Every rank of a launch of `np` processes on each of `sockets`, in rank order: rank =
    socket_index * np + local_rank, also the order in which the daemons number a job's ranks when
    the launcher gives none (host order, then local rank)."""
    size = len(sockets) * np
    return [Slot(i * np + l, size, i, s, l, np) for i, s in enumerate(sockets) for l in range(np)]


def rank_env(slot, job=None, give_rank=True):
    """The ALLREDUCED_* variables of one rank. job=None leaves ALLREDUCED_JOB out (the client
    library then names the job from another launcher's variables); give_rank=False leaves
    ALLREDUCED_RANK out (the daemons number the ranks, the same way)."""
    env = {"ALLREDUCED_SOCKET": slot.socket, "ALLREDUCED_SIZE": str(slot.size),
           "ALLREDUCED_LOCAL_RANK": str(slot.local_rank),
           "ALLREDUCED_LOCAL_SIZE": str(slot.local_size)}
    if job is not None:
        env["ALLREDUCED_JOB"] = job
    if give_rank:
        env["ALLREDUCED_RANK"] = str(slot.rank)
    return env


class RankGroup:
    """The processes of one launch, one per rank, started at construction.

    1. Each rank runs `command` with this process's environment less any inherited
       RANK_VARIABLES, plus rank_env(slot, job, give_rank) (or ALLREDUCED_SOCKET and, in place of
       the rest, env_for_rank(slot): another launcher's variables, say), plus `env` (a dict, or a
       function of the Slot giving one). Its stdout and stderr go to one pipe, procs[rank].stdout
       (str or bytes lines per `text`), read by the caller, or by a thread per rank that calls
       on_line(rank, line) (newline included) from read_lines() or the `on_line` argument on.
       new_session=True gives each rank a session and process group of its own: a terminal's
       Ctrl-C then reaches only the launcher, and signals go to the rank's whole group.
    2. wait() waits for the ranks: all of them, or up to the first failure, with a deadline.
       ended_at[rank] is the monotonic time the rank's exit was seen.
    3. stop() ends the ranks still running (SIGTERM, then SIGKILL after a grace), kill() at once;
       both reap them. Methods belong to one thread; on_line runs on the reader threads.
    """

    def __init__(self, sockets, np, command, job=None, env=None, env_for_rank=None,
                 give_rank=True, text=False, new_session=False, on_line=None):
        self.slots = slots(sockets, np)
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
                self.procs.append(subprocess.Popen(
                    command, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=text, start_new_session=new_session))
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
            if self.procs[rank].poll() is None:
                left.append(rank)
            else:
                self._ended(rank)
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
        group with new_session."""
        for rank in self.running(ranks):
            p = self.procs[rank]
            try:
                if self.new_session:
                    os.killpg(p.pid, signo)
                else:
                    p.send_signal(signo)
            except ProcessLookupError:
                pass  # its group is gone; the rank itself stays a zombie until reaped

    def stop(self, grace_s=10):
        """SIGTERM to every rank still running, SIGKILL to those left after grace_s; reaps all."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
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
            reader = self._readers.get(rank)
            if reader is None or not reader.is_alive():  # else a process of the rank's holds it
                self.procs[rank].stdout.close()

    def _join_readers(self, ranks=None, timeout_s=5):
        for rank in self._ranks(ranks):
            if rank in self._readers:
                self._readers[rank].join(timeout_s)


class _Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP reached the launcher."""

    def __init__(self, signo):
        super().__init__(signo)
        self.signo = signo


def _stop(group):
    """group.stop(), or at once on a second signal."""
    try:
        group.stop()
    except _Stopped:
        group.kill()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m allreduced.launch")
    parser.add_argument("--sockets", required=True, help="daemon sockets, one per host")
    parser.add_argument("--np", type=int, default=1, help="processes per daemon")
    parser.add_argument("--job", default=f"launch-{os.getpid()}", help="job name")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.np < 1:
        parser.error("give --np >= 1 and a command after --")
    sockets = [s for s in args.sockets.split(",") if s]
    out_lock = threading.Lock()

    def pump(rank, line):
        with out_lock:
            sys.stdout.buffer.write(f"[{rank}] ".encode() + line)
            sys.stdout.buffer.flush()

    group = None
    received = []

    def on_signal(signo, frame):
        received.append(signo)
        if group is not None:  # else raised once `group` holds every rank started
            raise _Stopped(signo)

    for signo in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signo) != signal.SIG_IGN:  # as under nohup, or `cmd &` in a script
            signal.signal(signo, on_signal)
    try:
        group = RankGroup(sockets, args.np, command, job=args.job, new_session=True,
                          on_line=pump)
        if received:
            raise _Stopped(received[0])
        failure = group.wait(fail_fast=True)
        if failure is None:
            return 0
        rank, code = failure
        sys.stderr.write(f"allreduced.launch: rank {rank} exited with {code}; "
                         "stopping the others\n")
        _stop(group)
        return code if code > 0 else 128 - code
    except OSError as e:  # from Popen: the ranks started before it were killed
        sys.stderr.write(f"allreduced.launch: cannot start {command[0]}: {e.strerror}\n")
        return 127
    except _Stopped as e:
        # The ranks have sessions of their own: a terminal's Ctrl-C reached only this process.
        sys.stderr.write(f"allreduced.launch: {signal.Signals(e.signo).name}; "
                         "stopping every rank\n")
        if group is not None:
            _stop(group)
        return 128 + e.signo


if __name__ == "__main__":
    sys.exit(main())
