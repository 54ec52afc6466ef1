"""Elastic PyTorch training with real daemons and real processes (elastic_worker.py): 3 hosts x 2
ranks with TorchState and ElasticSampler; one host (its daemon and its 2 ranks) SIGKILLed in the
middle of the first epoch. The 4 survivors roll back to their last commit, re-form, and finish
both epochs having processed every sample exactly once per epoch, with identical parameters."""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster  # noqa: E402
from allreduced.launch import RankGroup  # noqa: E402

PACKAGE_DIR = os.path.join(HERE, "..", "..", "python")
EPOCHS = 2


class Job:
    """`per_host` elastic workers per daemon socket; their output lines by start rank."""

    def __init__(self, sockets, per_host):
        env = {"PYTHONPATH": PACKAGE_DIR, "ALLREDUCED_CLIENT_LIB": os.environ["ARD_BIN_CLIENT_LIB"],
               "OMP_NUM_THREADS": "1", "ALLREDUCED_ELASTIC_MIN_NP": "2", "EPOCHS": str(EPOCHS)}
        self.lines = [[] for _ in range(len(sockets) * per_host)]
        self.seen = threading.Condition()
        self.group = RankGroup(sockets, per_host,
                               [sys.executable, os.path.join(HERE, "elastic_worker.py")],
                               job="torch-elastic", env=env, text=True, on_line=self._on_line)

    def _on_line(self, rank, line):
        with self.seen:
            self.lines[rank].append(line.rstrip("\n"))
            self.seen.notify_all()

    def wait_line(self, rank, prefix, timeout_s=300):
        deadline = time.monotonic() + timeout_s
        with self.seen:
            while not any(line.startswith(prefix) for line in self.lines[rank]):
                left = deadline - time.monotonic()
                assert left > 0, f"no '{prefix}' from rank {rank}:\n" + self.output()
                self.seen.wait(left)

    def output(self):
        return "\n".join(f"--- rank {r}\n" + "\n".join(ls) for r, ls in enumerate(self.lines))

    def final(self, rank):
        line = next(line for line in self.lines[rank] if line.startswith("FINAL "))
        _, new_rank, size, rest = line.split(" ", 3)
        visits, params = rest.split("] ", 1)
        return int(new_rank), int(size), json.loads(visits + "]"), json.loads(params)


def test_a_host_killed_mid_epoch_the_survivors_finish_every_sample_once():
    cluster = Cluster(host_timeout_ms=1000)
    try:
        daemons = [cluster.add(f"torch-el{i}", extra_flags=["--job_form_timeout_ms=60000"])
                   for i in range(3)]
        job = Job([d.socket for d in daemons], 2)
        job.wait_line(0, "STEP 0 3 ")  # an epoch is 8 steps of 6 ranks x 2 samples
        daemons[2].kill()
        job.group.kill(ranks=[4, 5])
        job.group.wait(timeout_s=400)
        codes = [p.returncode for p in job.group.procs]
        assert codes[:4] == [0] * 4, job.output() + cluster.logs()
        assert all(line.startswith("STEP 0 ") for line in job.lines[4] if "STEP" in line)
        finals = [job.final(r) for r in range(4)]
        assert sorted(f[0] for f in finals) == [0, 1, 2, 3], job.output()
        assert all(f[1] == 4 for f in finals), job.output()
        assert any(line == "RESUMED 4" for line in job.lines[0]), job.output()
        # Every sample went into exactly one committed step per epoch: none repeated, none skipped.
        assert finals[0][2] == [float(EPOCHS)] * 96, job.output()
        assert all(f[2] == finals[0][2] and f[3] == finals[0][3] for f in finals), job.output()
    finally:
        cluster.close()
