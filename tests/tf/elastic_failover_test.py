"""Coordinator failover with real TensorFlow elastic workers through the launcher (DESIGN.md
"Coordinator failover"): 3 daemons electing their coordinator through a 3-member etcd on loopback,
2 workers each (`--min-np 4 --max-np 6 -np 6`); mid-run the coordinator's daemon and its two
workers are SIGKILLed. The 4 survivors re-form under the newly elected coordinator and finish
with identical weights (those of the reference path); the time from the kill to the first
collective of the new generation is printed as a BENCH line."""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "fault"))
from elastic_launch_test import PACKAGE_DIR, WORKER, finals_of, watched_launch  # noqa: E402
from etcd_util import EtcdCluster  # noqa: E402
from harness import Cluster, status_json, wait_until  # noqa: E402

NAMES = ["fo-a", "fo-b", "fo-c"]


def coordinator_of(cluster):
    views = [(status_json(d.address) or {}).get("coordination") for d in cluster.daemons.values()]
    if not all(views) or len({v["coordinator"] for v in views}) != 1:
        return None
    return views[0]["coordinator"] or None


def workers_on(socket):
    """PIDs of the processes whose ALLREDUCED_SOCKET is `socket` (the launcher's workers there)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"ALLREDUCED_SOCKET={socket}".encode() in env:
            pids.append(int(pid))
    return pids


def test_coordinator_host_killed_survivors_reform_and_finish():
    etcd = EtcdCluster(3)
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(n, coordinator=False, extra_flags=[
            etcd.flag(), "--coordination_ttl_ms=3000", "--coordination_poll_ms=300"])
            for n in NAMES]
        coordinator = wait_until(lambda: coordinator_of(cluster), 30, "an elected coordinator")
        victim = cluster.daemons[coordinator]
        env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
                   ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"], ELASTIC_STEPS="40",
                   ELASTIC_SLEEP_S="0.1", ELASTIC_WAIT_AT="10:6")
        killed = []
        stepping = threading.Event()

        def on_line(line):
            # Kill once every rank ran past the step where all six had to be present.
            if " STEP 12 " in f" {line.partition('] ')[2]}" and not stepping.is_set():
                stepping.set()

        def kill_coordinator_host():
            if not stepping.wait(timeout=600):
                return
            pids = workers_on(victim.socket)
            killed.append(time.time())
            victim.proc.kill()
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            victim.proc.wait()
        killer = threading.Thread(target=kill_coordinator_host)
        killer.start()
        code, stdout, stderr = watched_launch(
            cluster, ["--min-np", "4", "--max-np", "6", "-np", "6", "--reset-limit", "10",
                      "--sockets", ",".join(d.socket for d in daemons), "--slots", "2",
                      "--job", "failover", sys.executable, WORKER], env,
            limit_s=900, on_line=on_line)
        stepping.set()
        killer.join()
        out = stdout + stderr
        assert killed, "the coordinator's host was never killed:\n" + out
        assert code == 0, out + cluster.logs()
        finals = finals_of(stdout)
        assert len(finals) == 4, out
        assert sorted(f[0] for f in finals.values()) == [0, 1, 2, 3], out
        assert all(f[1] == 4 for f in finals.values()), out
        assert len({json.dumps(f[2]) for f in finals.values()}) == 1, out
        assert all("reference=True" in f[3] for f in finals.values()), out
        resumed = sorted(float(l.partition("] ")[2].split()[1]) for l in stdout.splitlines()
                         if l.partition("] ")[2].startswith("RESUMED ")
                         and l.rstrip().endswith(" 4")
                         and float(l.partition("] ")[2].split()[1]) > killed[0])
        assert resumed, out
        new = coordinator_of_survivors(cluster, coordinator)
        print(f"BENCH coordinator host SIGKILL -> first collective of the new generation (4 ranks, "
              f"new coordinator {new}): {resumed[0] - killed[0]:.2f} s (lease TTL 3 s)")
    finally:
        cluster.close()
        etcd.close()


def coordinator_of_survivors(cluster, dead):
    for name, d in cluster.daemons.items():
        if name != dead:
            view = (status_json(d.address) or {}).get("coordination") or {}
            return view.get("coordinator")
    return None
