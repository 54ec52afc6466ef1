"""Per-op overhead of the framework bindings: a 4-byte allreduce (one float32) through
allreduced.torch (ctypes over libard_client.so) and through allreduced.tensorflow (the TF op
library's async kernel, eager), in the same run, against the same daemon, one rank each, so the
daemon's share is the same and the difference is the binding's. Each framework runs in its own
process, one after the other, `--rounds` times alternating (load on a shared machine drifts);
prints the median microseconds per op of each round and the ratio. A benchmark, not a test.

  .venv/bin/python bench/framework_op_overhead.py [--iters 2000] [--rounds 3]
  (from the source tree after `bazel build //daemon:allreduced //client:libard_client.so
  //tfplugin:_allreduced_ops.so`; PYTHONPATH=python)
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

WORKER = r"""
import statistics, sys, time
iters = int(sys.argv[2])
if sys.argv[1] == "torch":
    import torch
    import allreduced.torch as hvd
    hvd.init()
    x = torch.ones(1)
    op = lambda: hvd.allreduce(x, op=hvd.Sum, name="bench")
else:
    import tensorflow as tf
    import allreduced.tensorflow as hvd
    hvd.init()
    x = tf.ones([1])
    op = lambda: hvd.allreduce(x, op=hvd.Sum, name="bench").numpy()
for _ in range(200):
    op()
times = []
for _ in range(iters):
    t0 = time.perf_counter()
    op()
    times.append(time.perf_counter() - t0)
print(f"RESULT {statistics.median(times) * 1e6:.1f}")
hvd.shutdown()
"""


def start_daemon(workdir):
    daemon = os.path.join(ROOT, "bazel-bin", "daemon", "allreduced")
    sock, port = os.path.join(workdir, "d.sock"), os.path.join(workdir, "d.port")
    proc = subprocess.Popen([daemon, "--cluster_address=127.0.0.1:0", "--host_name=h0",
                             f"--local_socket={sock}", f"--port_file={port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (os.path.exists(port) and open(port).read().endswith("\n")):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the daemon did not start")
        time.sleep(0.05)
    return proc, sock


def run(framework, sock, iters, round_index):
    env = dict(os.environ, ALLREDUCED_SOCKET=sock, ALLREDUCED_JOB=f"{framework}-{round_index}",
               TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    env.setdefault("ALLREDUCED_TF_OPS", os.path.join(ROOT, "bazel-bin", "tfplugin",
                                                     "_allreduced_ops.so"))
    out = subprocess.run([sys.executable, "-c", WORKER, framework, str(iters)], env=env,
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{framework} worker failed:\n{out.stdout}\n{out.stderr}")
    return float(lines[0].split()[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ardfw.") as workdir:
        daemon, sock = start_daemon(workdir)
        try:
            print("round  torch_us  tensorflow_us  torch/tf")
            for i in range(args.rounds):
                torch_us = run("torch", sock, args.iters, i)
                tf_us = run("tensorflow", sock, args.iters, i)
                print(f"{i:5d}  {torch_us:8.1f}  {tf_us:13.1f}  {torch_us / tf_us:8.2f}",
                      flush=True)
        finally:
            daemon.terminate()
            daemon.wait()


if __name__ == "__main__":
    main()
