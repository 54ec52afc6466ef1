"""DistributedDataParallel step time with torch.distributed's "allreduced" backend and with gloo
(torch's own CPU backend), in the same run, on the same processes' layout: 2 daemons on loopback
as two hosts x `--per-host` processes (gloo's ranks ignore the daemons). Each backend runs
`--rounds` times, alternating (load on a shared machine drifts); prints the median milliseconds
per training step (forward, backward with DDP's bucketed allreduces, SGD step) of each round and
the ratio allreduced/gloo. A benchmark, not a test.

  .venv/bin/python bench/ddp_step_time.py [--per-host 2] [--steps 30] [--rounds 3] [--width 512]
  (from the source tree after `bazel build //daemon:allreduced //client:libard_client.so`)
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
from allreduced.launch import RankGroup  # noqa: E402

WORKER = r"""
import os, statistics, sys, time
import torch
import torch.distributed as dist
import allreduced.torch  # noqa: F401 (the "allreduced" backend)
backend, store, steps, width = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dist.init_process_group(backend, init_method=f"file://{store}",
                        rank=int(os.environ["HOROVOD_RANK"]),
                        world_size=int(os.environ["HOROVOD_SIZE"]))
torch.manual_seed(0)
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data, target = torch.randn(32, width), torch.randn(32, width)
times = []
for step in range(steps + 5):
    dist.barrier()
    t0 = time.perf_counter()
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(data), target).backward()
    optimizer.step()
    if step >= 5:
        times.append(time.perf_counter() - t0)
params = sum(p.numel() for p in model.parameters())
if dist.get_rank() == 0:
    print(f"RESULT {statistics.median(times) * 1e3:.2f} {params}", flush=True)
dist.destroy_process_group()
"""


def start_daemon(workdir, name, coordinator=None):
    """An allreduced on loopback; (process, socket path, its address)."""
    daemon = os.path.join(ROOT, "bazel-bin", "daemon", "allreduced")
    sock, port = os.path.join(workdir, f"{name}.sock"), os.path.join(workdir, f"{name}.port")
    flags = ["--cluster_address=127.0.0.1:0", f"--host_name={name}", f"--local_socket={sock}",
             f"--port_file={port}"] + ([f"--coordinator={coordinator}"] if coordinator else [])
    proc = subprocess.Popen([daemon] + flags, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (os.path.exists(port) and open(port).read().endswith("\n")):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"daemon {name} did not start")
        time.sleep(0.05)
    return proc, sock, f"127.0.0.1:{open(port).read().strip()}"


def run(backend, sockets, per_host, args, workdir, round_index):
    """One job of the DDP worker; (median ms per step on rank 0, number of parameters)."""
    store = os.path.join(workdir, f"store.{backend}.{round_index}")
    env = {"PYTHONPATH": os.path.join(ROOT, "python"), "OMP_NUM_THREADS": "1"}
    env.setdefault("ALLREDUCED_CLIENT_LIB",
                   os.path.join(ROOT, "bazel-bin", "client", "libard_client.so"))
    command = [sys.executable, "-c", WORKER, backend, store, str(args.steps), str(args.width)]
    group = RankGroup(sockets, per_host, command, job=f"ddp-{backend}-{round_index}", env=env,
                      text=True)
    outputs = [[] for _ in group.procs]
    group.read_lines(lambda rank, line: outputs[rank].append(line))
    failure = group.wait(timeout_s=600)
    lines = [line for out in outputs for line in out if line.startswith("RESULT ")]
    if failure or group.timed_out or not lines:
        raise RuntimeError(f"{backend} job failed:\n" + "".join(sum(outputs, [])))
    step_ms, params = lines[0].split()[1:]
    return float(step_ms), int(params)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ardddp.") as workdir:
        first, sock_a, address = start_daemon(workdir, "a")
        second, sock_b, _ = start_daemon(workdir, "b", coordinator=address)
        try:
            print("round  allreduced_ms  gloo_ms  allreduced/gloo")
            for i in range(args.rounds):
                ard_ms, params = run("allreduced", [sock_a, sock_b], args.per_host, args,
                                     workdir, i)
                gloo_ms, _ = run("gloo", [sock_a, sock_b], args.per_host, args, workdir, i)
                print(f"{i:5d}  {ard_ms:13.2f}  {gloo_ms:7.2f}  {ard_ms / gloo_ms:15.2f}",
                      flush=True)
            print(f"(2 hosts x {args.per_host} processes, {params} float32 parameters, "
                  f"median of {args.steps} steps)")
        finally:
            for proc in (second, first):
                proc.terminate()
                proc.wait()


if __name__ == "__main__":
    main()
