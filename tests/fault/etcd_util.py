"""A real etcd cluster for the failover tests: `n` members on loopback, each with its own client
and peer ports and data directory under a temp dir, killed (every one) by close(). Needs Debian's
etcd-server (tools/bootstrap.sh installs it)."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdCluster:
    def __init__(self, n=3):
        if not os.path.exists(ETCD):
            raise AssertionError("etcd is not installed: run tools/bootstrap.sh (etcd-server)")
        self.dir = tempfile.mkdtemp(prefix="ard-etcd.", dir="/tmp")
        self.names = [f"e{i}" for i in range(n)]
        self.client = {m: free_port() for m in self.names}
        self.peer = {m: free_port() for m in self.names}
        self.procs = {}
        initial = ",".join(f"{m}=http://127.0.0.1:{self.peer[m]}" for m in self.names)
        self.args = {m: [
            ETCD, "--name", m, "--data-dir", os.path.join(self.dir, m),
            "--listen-client-urls", f"http://127.0.0.1:{self.client[m]}",
            "--advertise-client-urls", f"http://127.0.0.1:{self.client[m]}",
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer[m]}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[m]}",
            "--initial-cluster", initial, "--initial-cluster-state", "new",
            "--initial-cluster-token", os.path.basename(self.dir),
            # Generous timing: this machine's two vCPUs are shared by several test runs.
            "--heartbeat-interval", "100", "--election-timeout", "1000",
        ] for m in self.names}
        for m in self.names:
            self.start(m)
        self.wait_healthy()

    def endpoints(self):
        return ",".join(f"127.0.0.1:{self.client[m]}" for m in self.names)

    def flag(self):
        return f"--coordination=etcd://{self.endpoints()}"

    def start(self, member):
        log = open(os.path.join(self.dir, member + ".log"), "ab")
        self.procs[member] = subprocess.Popen(self.args[member], stdout=log,
                                              stderr=subprocess.STDOUT)

    def kill(self, member):
        p = self.procs.pop(member, None)
        if p is not None:
            p.kill()
            p.wait()

    def leader(self):
        """The member that is etcd's raft leader now."""
        import json
        r = subprocess.run(["etcdctl", "--endpoints", ",".join(
            f"127.0.0.1:{self.client[m]}" for m in self.procs), "--command-timeout=2s",
            "endpoint", "status", "-w", "json"], capture_output=True, text=True,
            env=dict(os.environ, ETCDCTL_API="3"))
        for member in json.loads(r.stdout or "[]"):
            if member["Status"]["leader"] == member["Status"]["header"]["member_id"]:
                port = int(member["Endpoint"].rsplit(":", 1)[1])
                return next(m for m, p in self.client.items() if p == port)
        raise AssertionError("no etcd leader: " + r.stdout + r.stderr)

    def healthy(self, members=None):
        members = members or list(self.procs)
        r = subprocess.run(["etcdctl", "--endpoints",
                            ",".join(f"127.0.0.1:{self.client[m]}" for m in members),
                            "--command-timeout=2s", "endpoint", "health"],
                           capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"))
        return r.returncode == 0

    def wait_healthy(self, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if time.monotonic() > deadline:
                raise AssertionError("etcd did not become healthy:\n" + self.logs())
            time.sleep(0.2)

    def logs(self):
        out = []
        for m in self.names:
            path = os.path.join(self.dir, m + ".log")
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    out.append(f"--- etcd {m}\n" + "".join(f.readlines()[-30:]))
        return "\n".join(out)

    def close(self):
        for m in list(self.procs):
            self.kill(m)
        shutil.rmtree(self.dir, ignore_errors=True)
