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
import time

from allreduced.launch import elastic
from allreduced.launch.elastic_run import ElasticRun
from allreduced.launch import hosts as hosts_lib
from allreduced.launch.rank_group import RankGroup
from allreduced.launch.remote import REMOTE_GRACE_S

_DESCRIPTION = """\
Starts -np ranks of COMMAND over the hosts, like horovodrun: hosts from -H or --hostfile, else
the UP hosts of the cluster view (allreducectl status from --daemon) with as many slots as GPUs
(or --slots). Ranks fill the hosts in order. Ranks on this machine start directly, the others
over ssh. Each rank gets ALLREDUCED_JOB, ALLREDUCED_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE and its
host's daemon socket (ALLREDUCED_SOCKET, from the cluster view unless --socket). Output lines are
prefixed with [rank]. One rank failing stops the others and its exit code is returned; SIGINT or
SIGTERM stops every rank and exits 130 or 143.

Elastic (--min-np/--max-np): workers start in every free slot up to --max-np (at least -np,
default --min-np) with ALLREDUCED_ELASTIC_MIN_NP/MAX_NP, on the hosts of the cluster view or
--host-discovery-script (asked again every --discovery-interval seconds); new workers start in
free slots up to --max-np while the job runs. As with horovodrun, a worker that fails blacklists
its host (its other workers stop; no worker goes there again, or only after
--blacklist-cooldown-range's cooldown), a host that discovery drops leaves the job (its workers
stop), and the job stops with an error once it would re-form more than --reset-limit times. The
launcher ends when every worker has: 0 once a worker finished the job, else the last failure's
code."""


class _Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP reached the launcher."""

    def __init__(self, signo):
        super().__init__(signo)
        self.signo = signo


class _Signals:
    """Elastic mode's signal state: while `starting`, a signal is only recorded in `received`
    and check() raises it afterwards."""

    def __init__(self):
        self.starting = False
        self.received = []

    def check(self):
        if self.received:
            raise _Stopped(self.received[0])


def parser(prog="python -m allreduced.launch"):
    p = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION, allow_abbrev=False)
    p.add_argument("-np", "--num-proc", dest="np", type=int,
                   help="total number of ranks (elastic: at the start; default --min-np)")
    p.add_argument("--min-np", type=int, help="elastic: the fewest ranks the job trains with")
    p.add_argument("--max-np", type=int, help="elastic: the most ranks (default: -np)")
    p.add_argument("--reset-limit", type=int, help="elastic: the most re-formations of the job "
                   "(the next one stops it with an error)")
    p.add_argument("--blacklist-cooldown-range", type=float, nargs=2, metavar=("MIN", "MAX"),
                   help="elastic: a blacklisted host gets workers again after a cooldown of MIN "
                   "seconds, doubled per blacklisting, jittered, at most MAX (default: never)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", help="host1:2,host2:2 (host:slots; a bare host has "
                       "--slots, default 1)")
    where.add_argument("--hostfile", help="lines 'host slots=N' (or host:N)")
    where.add_argument("--sockets", help="daemons on this machine, one host each, by their "
                       "sockets (PATH,PATH...); ranks spread evenly unless --slots")
    where.add_argument("--host-discovery-script", help="elastic: prints the available hosts, "
                       "'host:slots' per line; run again every --discovery-interval")
    p.add_argument("--discovery-interval", type=float, default=elastic.DISCOVERY_INTERVAL_S,
                   metavar="SECONDS", help="elastic: how often the hosts are asked for again "
                   f"(the discovery script or the cluster view; default {elastic.DISCOVERY_INTERVAL_S:g})")
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


def _discoverer(args):
    """A function returning the hosts (with sockets) as the parsed arguments give them."""
    tls = [x for flag in ("tls_cert", "tls_key", "tls_ca") if getattr(args, flag)
           for x in (f"--{flag}", getattr(args, flag))]
    if args.sockets:
        sockets = [s for s in args.sockets.split(",") if s]
        per_host = args.slots or -(-args.max_np // len(sockets))
        return lambda: hosts_lib.socket_hosts(sockets, per_host)
    if args.host_discovery_script:
        def from_script():
            found = elastic.run_discovery_script(args.host_discovery_script)
            if args.socket:
                return [h._replace(socket=args.socket) for h in found]
            view = hosts_lib.cluster_view(hosts_lib.find_allreducectl(args.allreducectl),
                                          args.daemon, tls)
            up = {h.name for h in hosts_lib.view_hosts(view, 1)}
            return hosts_lib.with_view_sockets([h for h in found if h.name in up], view)
        return from_script
    return lambda: hosts_lib.discover(args.hosts, args.hostfile, args.slots, args.socket,
                                      args.daemon, args.allreducectl, tls, np=args.max_np)


def _run_elastic(name, command, args):
    """Elastic mode (see _DESCRIPTION); returns the exit code."""
    job = args.job or f"launch-{os.getpid()}-{secrets.token_hex(3)}"
    discover = _discoverer(args)
    table = elastic.SlotTable(args.blacklist_cooldown_range)
    try:
        table.update(discover())
    except hosts_lib.HostError as e:
        sys.stderr.write(f"{name}: {e}\n")
        return 2
    if any(h.local for h in table.hosts):
        why = _missing(command)
        if why:
            sys.stderr.write(f"{name}: cannot start {command[0]}: {why}\n")
            return 127
    env = {"ALLREDUCED_JOB": job, "ALLREDUCED_ELASTIC_MIN_NP": str(args.min_np),
           "ALLREDUCED_ELASTIC_MAX_NP": str(args.max_np)}
    # The launcher counts the job's resets (ElasticRun); a worker's own count is not the job's.
    env["ALLREDUCED_ELASTIC_RESET_LIMIT"] = ""
    options = {"job": job, "new_session": True,
               "ssh": {"ssh_port": args.ssh_port, "identity_file": args.ssh_identity_file,
                       "config_file": args.ssh_config_file}}
    out_lock = threading.Lock()

    def log(number, line):
        with out_lock:
            if number is None:
                sys.stderr.buffer.write(f"{name}: ".encode() + line)
                sys.stderr.buffer.flush()
            else:
                sys.stdout.buffer.write(f"[{number}] ".encode() + line)
                sys.stdout.buffer.flush()

    signals = _Signals()
    job_run = ElasticRun(table, discover, command, env, options, log, signals,
                         args.discovery_interval, args.reset_limit)
    workers = job_run.workers

    def on_signal(signo, frame):
        signals.received.append(signo)
        if not signals.starting:
            raise _Stopped(signo)

    for signo in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signo) != signal.SIG_IGN:
            signal.signal(signo, on_signal)
    try:
        return job_run.run(args.np, args.max_np)
    except hosts_lib.HostError as e:
        sys.stderr.write(f"{name}: {e}\n")
        _stop_all([w.group for w in workers])
        return 2
    except OSError as e:
        sys.stderr.write(f"{name}: cannot start {e.filename or command[0]}: {e.strerror}\n")
        _stop_all([w.group for w in workers])
        return 127
    except _Stopped as e:
        sys.stderr.write(f"{name}: {signal.Signals(e.signo).name}; stopping every rank\n")
        _stop_all([w.group for w in workers])
        return 128 + e.signo


def plan(args):
    """The launch's slots (hosts.Slot list) per the parsed arguments; raises hosts.HostError."""
    if args.sockets:
        sockets = [s for s in args.sockets.split(",") if s]
        slots = args.slots or -(-args.np // len(sockets))
        return hosts_lib.assign(hosts_lib.socket_hosts(sockets, slots), args.np)
    tls = [x for flag in ("tls_cert", "tls_key", "tls_ca") if getattr(args, flag)
           for x in (f"--{flag}", getattr(args, flag))]
    return hosts_lib.assign(hosts_lib.discover(
        args.hosts, args.hostfile, args.slots, args.socket, args.daemon, args.allreducectl, tls,
        np=args.np), args.np)


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
    is_elastic = any(x is not None for x in (args.min_np, args.max_np, args.reset_limit,
                                             args.host_discovery_script,
                                             args.blacklist_cooldown_range))
    if is_elastic:
        if args.min_np is None:
            p.error("elastic mode needs --min-np")
        args.np = args.min_np if args.np is None else args.np
        args.max_np = args.np if args.max_np is None else args.max_np
        if not 1 <= args.min_np <= args.np <= args.max_np:
            p.error("elastic mode needs 1 <= --min-np <= -np <= --max-np")
        if args.reset_limit is not None and args.reset_limit < 0:
            p.error("--reset-limit takes a number >= 0")
        low, high = args.blacklist_cooldown_range or (1, 1)
        if not 0 < low <= high:
            p.error("--blacklist-cooldown-range takes MIN and MAX seconds, 0 < MIN <= MAX")
        if not args.discovery_interval > 0:
            p.error("--discovery-interval takes a number of seconds > 0")
    if args.np is None:
        p.error("the following arguments are required: -np")
    if args.np < 1 or (args.slots is not None and args.slots < 1):
        p.error("-np and --slots take a number >= 1")
    name = prog.split()[-1] if prog.startswith("python") else prog
    if is_elastic:
        return _run_elastic(name, command, args)
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


def _stop_all(groups):
    """RankGroup.stop() of every group with one grace for all, or kill() at once on a second
    signal."""
    try:
        for g in groups:
            g.signal(signal.SIGTERM)
        remote = any(not s.local for g in groups for s in g.slots)
        deadline = time.monotonic() + REMOTE_GRACE_S + (5 if remote else 0)
        while any(g.running() for g in groups) and time.monotonic() < deadline:
            time.sleep(0.05)
    except _Stopped:
        pass
    for g in groups:
        g.kill()
