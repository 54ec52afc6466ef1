"""Horovod's own PyTorch example, examples/pytorch/pytorch_synthetic_benchmark.py, unchanged but
for its import line (`import horovod.torch as hvd` -> `import allreduced.torch as hvd`), through
our launcher (`python -m allreduced.launch`) on 2 daemons x 1 and x 2 processes, with few
iterations. The script is read at test time from a Horovod git checkout ($HOROVOD_GIT_DIR,
default /work/.mirror/horovod+horovod/repo) and copied into a temporary directory."""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster  # noqa: E402

PACKAGE_DIR = os.path.join(HERE, "..", "..", "python")
EXAMPLE = "examples/pytorch/pytorch_synthetic_benchmark.py"
HOROVOD_IMPORT = "import horovod.torch as hvd\n"


def example_source():
    git_dir = os.environ.get("HOROVOD_GIT_DIR", "/work/.mirror/horovod+horovod/repo")
    shown = subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{EXAMPLE}"],
                           capture_output=True, text=True)
    assert shown.returncode == 0, (f"cannot read {EXAMPLE} from the Horovod checkout {git_dir} "
                                   f"(set HOROVOD_GIT_DIR): {shown.stderr}")
    assert shown.stdout.count(HOROVOD_IMPORT) == 1, "the example's import line changed"
    return shown.stdout.replace(HOROVOD_IMPORT, "import allreduced.torch as hvd\n")


@pytest.mark.parametrize("per_host,model,extra", [(1, "resnet18", []),
                                                  (2, "squeezenet1_1", ["--fp16-allreduce"])],
                         ids=["2x1-resnet18", "2x2-squeezenet-fp16"])
def test_pytorch_synthetic_benchmark_runs_through_the_launcher(tmp_path, per_host, model, extra):
    script = tmp_path / "pytorch_synthetic_benchmark.py"
    script.write_text(example_source())
    cluster = Cluster(host_timeout_ms=10000)
    try:
        sockets = [cluster.add(f"hvd-example-{i}").socket for i in range(2)]
        env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, OMP_NUM_THREADS="1",
                   ALLREDUCED_CLIENT_LIB=os.environ["ARD_BIN_CLIENT_LIB"])
        run = subprocess.run(
            [sys.executable, "-m", "allreduced.launch", "-np", str(2 * per_host), "--sockets",
             ",".join(sockets), "--job", f"hvd-example-{per_host}", "--", sys.executable,
             str(script), "--no-cuda", "--model", model, "--batch-size", "2",
             "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "2",
             *extra], env=env, capture_output=True, text=True, timeout=900)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out + cluster.logs()
        assert f"Number of CPUs: {2 * per_host}" in out, out
        assert re.search(rf"Total img/sec on {2 * per_host} CPU\(s\): \d", out), out
    finally:
        cluster.close()
