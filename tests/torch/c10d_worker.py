"""One process of the torch.distributed tests: `python c10d_worker.py BACKEND SCENARIO OUT_DIR`,
rank and world size from the launcher's HOROVOD_RANK/HOROVOD_SIZE, torch's store a FileStore in
OUT_DIR (init_method file://).
Scenarios: "ops" checks every collective the allreduced backend serves against values computed
locally; "ddp" trains a small model with DistributedDataParallel and saves the rank's final
parameters to OUT_DIR/rank<r>.pt (rank 0 also the initial ones, initial.pt); "lost_rank":
rank 1 dies, the others' next collective must fail. Prints `OK <scenario>` when done."""
import os
import sys

import torch
import torch.distributed as dist

import allreduced.torch  # noqa: F401  (registers the "allreduced" backend)


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)


def close(a, b, what):
    check(torch.allclose(a.double(), b.double(), atol=1e-6, rtol=1e-6), f"{what}: {a} != {b}")


def ops_scenario(_):
    r, n = dist.get_rank(), dist.get_world_size()
    check(dist.get_backend() == "allreduced", f"backend {dist.get_backend()}")
    mine = lambda k: torch.arange(6, dtype=torch.float32).reshape(2, 3) * (k + 1)  # noqa: E731
    every = torch.stack([mine(k) for k in range(n)])
    for op, want in ((dist.ReduceOp.SUM, every.sum(0)), (dist.ReduceOp.MAX, every.max(0).values),
                     (dist.ReduceOp.MIN, every.min(0).values),
                     (dist.ReduceOp.PRODUCT, every.prod(0)), (dist.ReduceOp.AVG, every.mean(0))):
        t = mine(r)
        dist.all_reduce(t, op=op)
        close(t, want, f"all_reduce {op}")
    works = [dist.all_reduce(torch.full([3], float(r + i)), async_op=True) for i in range(3)]
    for i, work in enumerate(works):
        value = work.get_future().wait()[0]
        close(value, torch.full([3], float(n * (n - 1) / 2 + n * i)), f"future {i}")
        check(work.wait() is True, f"work {i} wait")
    t = mine(r)
    dist.broadcast(t, src=n - 1)
    close(t, mine(n - 1), "broadcast")
    outs = [torch.empty(2, 3) for _ in range(n)]
    dist.all_gather(outs, mine(r))
    close(torch.stack(outs), every, "all_gather")
    out = torch.empty(n * 2, 3)
    dist.all_gather_into_tensor(out, mine(r))
    close(out, every.reshape(n * 2, 3), "all_gather_into_tensor")
    out = torch.empty(2, 3)
    dist.reduce_scatter(out, [mine(r) + k for k in range(n)])
    close(out, every.sum(0) + n * r, "reduce_scatter")
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, torch.arange(2.0 * n) * (r + 1))
    close(out, torch.arange(2.0 * r, 2.0 * r + 2) * (n * (n + 1) / 2), "reduce_scatter_tensor")
    outs = [torch.empty(r + 1) for _ in range(n)]
    dist.all_to_all(outs, [torch.full([k + 1], float(10 * r + k)) for k in range(n)])
    close(torch.cat(outs), torch.cat([torch.full([r + 1], float(10 * k + r)) for k in range(n)]),
          "all_to_all")
    out = torch.empty(n, 2)
    dist.all_to_all_single(out, torch.arange(2.0 * n).reshape(n, 2) + 100 * r)
    want = torch.stack([torch.arange(2.0 * r, 2.0 * r + 2) + 100 * k for k in range(n)])
    close(out, want, "all_to_all_single")
    dist.barrier()
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
        check(False, "BAND refused")
    except ValueError as error:
        check("not supported" in str(error), f"BAND error: {error}")
    t = torch.ones(1)
    dist.all_reduce(t)  # the refused call took no sequence number: the ranks still agree
    close(t, torch.full([1], float(n)), "after a refused call")


def ddp_scenario(out_dir):
    """8 steps of SGD with momentum on a fixed data set, each rank on its own shard."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    if dist.get_rank() != 0:  # DDP broadcasts rank 0's parameters at construction
        for p in model.parameters():
            torch.nn.init.normal_(p)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    if dist.get_rank() == 0:
        torch.save([p.detach().clone() for p in model.parameters()],
                   os.path.join(out_dir, "initial.pt"))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    target = torch.randn(64, 4, generator=torch.Generator().manual_seed(2))
    shard = slice(dist.get_rank(), None, dist.get_world_size())
    for step in range(8):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(data[shard] * (step + 1)), target[shard])
        loss.backward()
        optimizer.step()
    torch.save([p.detach() for p in model.parameters()],
               os.path.join(out_dir, f"rank{dist.get_rank()}.pt"))


def lost_rank_scenario(_):
    """Rank 1 dies without leaving the job; the others' next collective fails with c10d's
    DistBackendError naming the daemon's reason (no hang)."""
    t = torch.ones(1)
    dist.all_reduce(t)
    if dist.get_rank() == 1:
        os._exit(3)
    try:
        dist.all_reduce(torch.ones(1000))
        check(False, "the all_reduce after a lost rank failed")
    except dist.DistBackendError as error:
        print(f"ERROR {error}", flush=True)
    print("OK lost_rank", flush=True)
    os._exit(0)  # the group cannot be destroyed cleanly any more


def main():
    backend, scenario, out_dir = sys.argv[1:4]
    dist.init_process_group(backend, init_method=f"file://{os.path.join(out_dir, 'store')}",
                            rank=int(os.environ["HOROVOD_RANK"]),
                            world_size=int(os.environ["HOROVOD_SIZE"]))
    {"ops": ops_scenario, "ddp": ddp_scenario,
     "lost_rank": lost_rank_scenario}[scenario](out_dir)
    dist.destroy_process_group()
    print(f"OK {scenario}", flush=True)


if __name__ == "__main__":
    main()
