"""`python -m allreduced.launch` and `allreducectl run`: horovodrun's command line over
hosts.py (where ranks run) and RankGroup (starting and stopping them). Runs on the main thread;
rank output is copied by RankGroup's reader threads. Standard library only.
"""
import argparse
import os
import secrets
import shutil
import signal
import sys
import threading

from allreduced.launch import hosts as hosts_lib
from allreduced.launch.rank_group import RankGroup

_DESCRIPTION = """\
Starts -np ranks of COMMAND over the hosts, like horovodrun: hosts from -H or --hostfile, else
the UP hosts of the cluster view (allreducectl status from --daemon) with as many slots as GPUs
(or --slots). Ranks fill the hosts in order. Ranks on this machine start directly, the others
over ssh. Each rank gets ALLREDUCED_JOB, ALLREDUCED_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE and its
host's daemon socket (ALLREDUCED_SOCKET, from the cluster view unless --socket). Output lines are
prefixed with [rank]. One rank failing stops the others and its exit code is returned; SIGINT or
SIGTERM stops every rank and exits 130 or 143."""


class _Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP reached the launcher."""

    def __init__(self, signo):
        super().__init__(signo)
        self.signo = signo


def parser(prog="python -m allreduced.launch"):
    p = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION, allow_abbrev=False)
    p.add_argument("-np", "--num-proc", dest="np", type=int, required=True,
                   help="total number of ranks")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", help="host1:2,host2:2 (host:slots; a bare host has "
                       "--slots, default 1)")
    where.add_argument("--hostfile", help="lines 'host slots=N' (or host:N)")
    where.add_argument("--sockets", help="daemons on this machine, one host each, by their "
                       "sockets (PATH,PATH...); ranks spread evenly unless --slots")
    p.add_argument("--slots", type=int, help="ranks per host (cluster view: instead of its GPU "
                   "count)")
    p.add_argument("--socket", help="every host's daemon socket; the cluster view is not asked")
    p.add_argument("--daemon", help="a daemon's admin address for the cluster view "
                   f"(default $ALLREDUCED_DAEMON, else {hosts_lib.DEFAULT_DAEMON})")
    p.add_argument("--job", help="job name (default launch-<pid>-<random>)")
    p.add_argument("-p", "--ssh-port", type=int, help="ssh port of the remote hosts")
    p.add_argument("-i", "--ssh-identity-file", help="ssh private key")
    p.add_argument("--ssh-config-file", help="ssh configuration file (ssh -F)")
    p.add_argument("--allreducectl", help="allreducectl to read the cluster view with "
                   "(default $ALLREDUCECTL, else on PATH)")
    for flag in ("--tls_cert", "--tls_key", "--tls_ca"):
        p.add_argument(flag, help="passed to allreducectl")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command each rank runs")
    return p


def plan(args):
    """The launch's slots (hosts.Slot list) per the parsed arguments; raises hosts.HostError."""
    if args.sockets:
        sockets = [s for s in args.sockets.split(",") if s]
        slots = args.slots or -(-args.np // len(sockets))
        return hosts_lib.assign(hosts_lib.socket_hosts(sockets, slots), args.np)
    tls = [x for flag in ("tls_cert", "tls_key", "tls_ca") if getattr(args, flag)
           for x in (f"--{flag}", getattr(args, flag))]
    return hosts_lib.assign(hosts_lib.discover(
        args.hosts, args.hostfile, args.slots, args.socket, args.daemon, args.allreducectl, tls),
        args.np)


def _missing(command):
    """Why `command` cannot start on this machine, or None."""
    path = command[0] if "/" in command[0] else shutil.which(command[0])
    if path is None:
        return "command not found"
    if os.path.isdir(path):
        return "Is a directory"
    if not os.path.isfile(path):
        return "No such file or directory"
    if not os.access(path, os.X_OK):
        return "Permission denied"
    return None


def main(argv=None, prog="python -m allreduced.launch"):
    p = parser(prog)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to run after the options (or after --)")
    if args.np < 1 or (args.slots is not None and args.slots < 1):
        p.error("-np and --slots take a number >= 1")
    name = prog.split()[-1] if prog.startswith("python") else prog
    try:
        slots = plan(args)
    except hosts_lib.HostError as e:
        sys.stderr.write(f"{name}: {e}\n")
        return 2
    if any(s.local for s in slots):
        why = _missing(command)
        if why:
            sys.stderr.write(f"{name}: cannot start {command[0]}: {why}\n")
            return 127
    return _run(name, slots, command, args)


def _run(name, slots, command, args):
    """Starts the ranks and waits for them (see _DESCRIPTION); returns the exit code."""
    job = args.job or f"launch-{os.getpid()}-{secrets.token_hex(3)}"
    ssh = {"ssh_port": args.ssh_port, "identity_file": args.ssh_identity_file,
           "config_file": args.ssh_config_file}
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
        group = RankGroup.of_slots(slots, command, job=job, new_session=True, on_line=pump,
                                   ssh=ssh)
        if received:
            raise _Stopped(received[0])
        failure = group.wait(fail_fast=True)
        if failure is None:
            return 0
        rank, code = failure
        where = "" if slots[rank].local else f" on {slots[rank].host}"
        why = " (ssh exits 255 when it fails: see its message above)" if (
            where and code == 255) else ""
        sys.stderr.write(f"{name}: rank {rank}{where} exited with {code}{why}; stopping the "
                         "others\n")
        _stop(group)
        return code if code > 0 else 128 - code
    except OSError as e:  # from Popen: the ranks started before it were killed
        sys.stderr.write(f"{name}: cannot start {e.filename or command[0]}: {e.strerror}\n")
        return 127
    except _Stopped as e:
        # The ranks have sessions of their own: a terminal's Ctrl-C reached only this process.
        sys.stderr.write(f"{name}: {signal.Signals(e.signo).name}; stopping every rank\n")
        if group is not None:
            _stop(group)
        return 128 + e.signo


def _stop(group):
    """group.stop(), or at once on a second signal."""
    try:
        group.stop()
    except _Stopped:
        group.kill()
