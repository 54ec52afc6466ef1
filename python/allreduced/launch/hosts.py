"""Where a launch's ranks run: the hosts (from -H, a hostfile, local daemon sockets or the
cluster view), their slots and daemon sockets, and the rank of every slot. discover() is the
whole of it as the launcher's options say; pure functions except read_hostfile() (reads the file),
cluster_view() and discover() (run allreducectl) and is_local() (this machine's names). Kept apart
from process starting so that other launch modes (elastic) reuse the same discovery. Standard
library only.
"""
import collections
import json
import os
import shutil
import socket
import subprocess

# One host of a launch. name: what -H, the hostfile or the cluster view calls it (the ssh
# target); slots: how many ranks it may run; socket: its daemon's local socket path there (None:
# not known yet); local: its ranks start on this machine directly, not over ssh.
Host = collections.namedtuple("Host", "name slots socket local")


class Slot(collections.namedtuple(
        "Slot", "rank size host_index host socket local_rank local_size local cross_rank "
        "cross_size", defaults=(None, None))):
    """One rank of a launch: host_index-th host used (in rank order), named `host`, whose daemon
    listens on `socket`; `local` as Host.local. cross_rank/cross_size as Horovod defines them:
    this host's place among, and the number of, the launch's hosts that have a rank of this
    local_rank (None: not known, e.g. an elastic replacement)."""
    __slots__ = ()

    @property
    def socket_index(self):
        """host_index, by the name RankGroup(sockets, np) callers know it."""
        return self.host_index


class HostError(Exception):
    """The hosts cannot be worked out or cannot hold the ranks; the message says why, in one
    line."""


DEFAULT_DAEMON = "127.0.0.1:7070"


def parse_hosts(text, default_slots=1):
    """-H's "host1:2,host2:2" (a host without ":N" has default_slots) as Hosts in that order,
    socket unknown."""
    hosts = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, sep, count = item.rpartition(":") if ":" in item else (item, "", "")
        hosts.append(_host(name if sep else item, count if sep else default_slots, f"-H {item}"))
    if not hosts:
        raise HostError(f"-H {text!r} names no host")
    return _unique(hosts)


def read_hostfile(path, default_slots=1):
    """A hostfile: one host per line, "host slots=N" (Open MPI's form), "host:N" or "host";
    '#' starts a comment."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise HostError(f"cannot read hostfile {path}: {e.strerror}")
    hosts = []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path}:{number}"
        if len(words) == 1 and ":" in words[0]:
            name, count = words[0].rsplit(":", 1)
        elif len(words) == 1:
            name, count = words[0], default_slots
        elif len(words) == 2 and words[1].startswith("slots="):
            name, count = words[0], words[1][len("slots="):]
        else:
            raise HostError(f"{where}: expected 'host slots=N', 'host:N' or 'host', got {line!r}")
        hosts.append(_host(name, count, where))
    if not hosts:
        raise HostError(f"hostfile {path} names no host")
    return _unique(hosts)


def socket_hosts(sockets, slots):
    """Daemons on this machine given by their sockets (several daemons on one machine: tests,
    trials), one host each, named local0, local1, ..."""
    return [Host(f"local{i}", slots, s, True) for i, s in enumerate(sockets)]


def _host(name, count, where):
    try:
        slots = int(count)
    except ValueError:
        slots = -1
    if not name or slots < 1:
        raise HostError(f"{where}: needs a host name and a slot count >= 1")
    return Host(name, slots, None, is_local(name))


def _unique(hosts):
    seen = set()
    for h in hosts:
        if h.name in seen:
            raise HostError(f"host {h.name} is named twice")
        seen.add(h.name)
    return hosts


def is_local(name):
    """Whether `name` is this machine: localhost, a loopback address, or its host name (short or
    fully qualified), as the daemons name their hosts by default."""
    if name in ("localhost", "127.0.0.1", "::1"):
        return True
    own = socket.gethostname()
    return name in (own, own.split(".", 1)[0], socket.getfqdn())


def find_allreducectl(path=None):
    """allreducectl to ask the cluster view with: `path`, else $ALLREDUCECTL, else on PATH."""
    found = path or os.environ.get("ALLREDUCECTL") or shutil.which("allreducectl")
    if not found:
        raise HostError("allreducectl not found (on PATH or $ALLREDUCECTL), needed to read the "
                        "cluster view; or give every host's socket with --socket")
    return found


def cluster_view(allreducectl, daemon=None, tls=(), timeout_s=30):
    """`allreducectl status --json` from `daemon` (default $ALLREDUCED_DAEMON, else
    DEFAULT_DAEMON), parsed. tls: extra allreducectl flags (--tls_cert FILE ...)."""
    daemon = daemon or os.environ.get("ALLREDUCED_DAEMON") or DEFAULT_DAEMON
    command = [allreducectl, "--daemon", daemon] + list(tls) + ["status", "--json"]
    try:
        r = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except OSError as e:
        raise HostError(f"cannot run {allreducectl}: {e.strerror}")
    except subprocess.TimeoutExpired:
        raise HostError(f"allreducectl status from {daemon} took over {timeout_s}s")
    # 3: the cluster answered and some host is DOWN (its view is still whole; DOWN hosts are
    # skipped below). Anything else (4: a follower's own view only) is no cluster view.
    if r.returncode not in (0, 3):
        why = r.stderr.strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        raise HostError(f"no cluster view from the daemon at {daemon}: {why[0]}")
    return json.loads(r.stdout)


def view_hosts(view, slots=None):
    """The UP hosts of a cluster view (allreducectl status --json), in the view's order, with
    `slots` each, else as many as their GPUs."""
    hosts = []
    for h in view.get("hosts", []):
        if h.get("state") != "UP":
            continue
        count = slots if slots is not None else len(h.get("gpus", []))
        if count < 1:
            raise HostError(f"host {h['name']} has no GPUs: give --slots N (processes per host) "
                            "or -H host:N")
        hosts.append(Host(h["name"], count, h.get("local_socket") or None, is_local(h["name"])))
    if not hosts:
        raise HostError("the cluster view has no UP host")
    return hosts


def with_view_sockets(hosts, view):
    """`hosts` (from -H or a hostfile) with each one's socket from the cluster view; every host
    must be UP there."""
    up = {h["name"]: h for h in view.get("hosts", []) if h.get("state") == "UP"}
    missing = [h.name for h in hosts if h.name not in up]
    if missing:
        raise HostError(f"no UP daemon in the cluster view for {', '.join(missing)} (UP: "
                        f"{', '.join(sorted(up)) or 'none'}); or give the socket with --socket")
    return [h._replace(socket=up[h.name].get("local_socket") or None) for h in hosts]


def discover(hosts_text=None, hostfile=None, slots=None, socket_path=None, daemon=None,
             allreducectl=None, tls=(), np=None):
    """The hosts of a launch, as the launcher's options give them: -H's `hosts_text` or
    `hostfile` (a host without a count has `slots`, default 1), else the cluster view's UP hosts
    (`slots` each, else their GPU count; with neither `slots` nor any GPU, as horovodrun's
    localhost:np, the answering daemon's host with `np` slots). Sockets: `socket_path` for every
    host (then the cluster view is not asked, and the hosts must be given), else the cluster
    view's. The cluster view comes from `daemon` through `allreducectl` (find_allreducectl)
    with `tls`."""
    if hosts_text:
        hosts = parse_hosts(hosts_text, slots or 1)
    elif hostfile:
        hosts = read_hostfile(hostfile, slots or 1)
    else:
        hosts = None
    if socket_path:
        if hosts is None:
            raise HostError("--socket needs the hosts (-H or --hostfile)")
        return [h._replace(socket=socket_path) for h in hosts]
    view = cluster_view(find_allreducectl(allreducectl), daemon, tls)
    if hosts is not None:
        return with_view_sockets(hosts, view)
    if slots is None and np is not None and not any(
            h.get("gpus") for h in view.get("hosts", []) if h.get("state") == "UP"):
        return answering_host(view, np, daemon)
    return view_hosts(view, slots)


def answering_host(view, np, daemon=None):
    """horovodrun's `-np N` without hosts (localhost:N) on a cluster without GPUs: the host of
    the daemon that answered the cluster view with `np` slots; local (no ssh) when its name is
    this machine's or the daemon was asked on this machine (`daemon`, default DEFAULT_DAEMON)."""
    name = view.get("answered_by", "")
    address = daemon or os.environ.get("ALLREDUCED_DAEMON") or DEFAULT_DAEMON
    local = is_local(name) or is_local(address.rsplit(":", 1)[0].strip("[]"))
    for h in view.get("hosts", []):
        if h.get("name") == name and h.get("state") == "UP":
            return [Host(name, np, h.get("local_socket") or None, local)]
    raise HostError(f"the daemon that answered ({name or 'unknown'}) is not an UP host of the "
                    "cluster view: give the hosts with -H host:N")


def assign(hosts, np):
    """Slots for `np` ranks over `hosts`: hosts in order, each filled up to its slots (ranks
    host-major, as the daemons number a job's ranks when the launcher gives none). Hosts left
    without a rank are left out."""
    total = sum(h.slots for h in hosts)
    if np < 1 or np > total:
        raise HostError(f"-np {np}: the hosts have {total} slot(s) ("
                        + ", ".join(f"{h.name}:{h.slots}" for h in hosts) + ")")
    counts = []
    for h in hosts:
        count = min(h.slots, np - sum(counts))
        if count == 0:
            break
        if not h.socket:
            raise HostError(f"host {h.name}: its daemon's socket is not known (a daemon "
                            "older than this launcher?): give it with --socket")
        counts.append(count)
    result = []
    for index, (h, count) in enumerate(zip(hosts, counts)):
        for l in range(count):
            cross_rank = sum(1 for c in counts[:index] if c > l)
            cross_size = sum(1 for c in counts if c > l)
            result.append(Slot(len(result), np, index, h.name, h.socket, l, count, h.local,
                               cross_rank, cross_size))
    return result


def local_slots(sockets, np):
    """`np` ranks on each of `sockets` (daemons on this machine), rank = socket_index * np +
    local_rank: what RankGroup(sockets, np) starts."""
    return assign(socket_hosts(sockets, np), len(sockets) * np)
