"""One PyTorch process for the allreduced.torch tests: `python torch_worker.py SCENARIO`, rank
info from the environment like any launcher sets it. Prints `OK <scenario>` when every check
passed (numerics checked on every rank against values computed locally)."""
import sys

import torch

import allreduced.torch as hvd


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)


def close(a, b, what, tol=1e-5):
    check(torch.allclose(a.double(), b.double(), atol=tol, rtol=tol), f"{what}: {a} != {b}")


def ops_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    check(0 <= r < n and 0 <= hvd.local_rank() < hvd.local_size() <= n, "topology")
    check(hvd.cross_size() * hvd.local_size() == n and hvd.is_homogeneous(), "cross topology")
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4) - 5
    mine = lambda k: base * (k + 1)  # noqa: E731  (rank k's tensor)
    every = torch.stack([mine(k) for k in range(n)])
    expected = {hvd.Sum: every.sum(0), hvd.Average: every.mean(0), hvd.Min: every.min(0).values,
                hvd.Max: every.max(0).values, hvd.Product: every.prod(0)}
    for op, want in expected.items():
        for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
            if dtype.is_floating_point or op != hvd.Average:
                got = hvd.allreduce(mine(r).to(dtype), op=op)
                check(got.dtype == dtype, f"dtype kept {dtype}")
                close(got, want.to(dtype), f"allreduce op {op} {dtype}")
    for dtype, tol in ((torch.float16, 1e-2), (torch.bfloat16, 5e-2)):
        got = hvd.allreduce(torch.full([5], 0.5 * (r + 1), dtype=dtype), op=hvd.Sum, name=str(dtype))
        close(got, torch.full([5], 0.5 * n * (n + 1) / 2), f"allreduce {dtype}", tol)
    got = hvd.allreduce(mine(r), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    close(got, every.sum(0) * 1.5, "prescale/postscale")
    t = mine(r).clone()
    hvd.allreduce_(t, op=hvd.Sum)
    close(t, every.sum(0), "allreduce_")
    handles = [hvd.allreduce_async(mine(r) + i, op=hvd.Sum, name=f"async.{i}") for i in range(4)]
    for i, h in enumerate(handles):
        close(hvd.synchronize(h), every.sum(0) + i * n, f"async {i}")
    check(hvd.poll(hvd.allreduce_async(torch.ones(1), name="polled")) in (True, False), "poll")
    grouped = hvd.grouped_allreduce([mine(r), torch.ones(2) * r], op=hvd.Sum)
    close(grouped[0], every.sum(0), "grouped 0")
    close(grouped[1], torch.ones(2) * (n * (n - 1) / 2), "grouped 1")
    gathered = hvd.allgather(torch.full([r + 1, 2], float(r)))
    want = torch.cat([torch.full([k + 1, 2], float(k)) for k in range(n)])
    close(gathered, want, "allgather uneven")
    close(hvd.broadcast(mine(r), root_rank=n - 1), mine(n - 1), "broadcast")
    t = mine(r).clone()
    hvd.broadcast_(t, root_rank=1)
    close(t, mine(1), "broadcast_")
    splits = torch.tensor([k + 1 for k in range(n)], dtype=torch.int32)
    rows = torch.arange(int(splits.sum()), dtype=torch.float32) + 100 * r
    received, received_splits = hvd.alltoall(rows, splits=splits)
    check(received_splits.tolist() == [r + 1] * n, f"alltoall splits {received_splits}")
    offset = sum(range(1, r + 1))
    want = torch.cat([torch.arange(offset, offset + r + 1, dtype=torch.float32) + 100 * k
                      for k in range(n)])
    close(received, want, "alltoall")
    scattered = hvd.reducescatter(mine(r)[:, :2].repeat(n, 1), op=hvd.Sum)
    close(scattered, every.sum(0)[:, :2], "reducescatter")
    compressed = hvd.allreduce(mine(r).float(), op=hvd.Sum, compression=hvd.Compression.fp16)
    check(compressed.dtype == torch.float32, "fp16 compression restores the dtype")
    close(compressed, every.sum(0), "fp16 compression", 1e-2)
    close(hvd.allreduce(torch.ones(3, 3).t(), op=hvd.Sum), torch.full([3, 3], float(n)),
          "non-contiguous input")
    check(hvd.broadcast_object({"r": r}, root_rank=1) == {"r": 1}, "broadcast_object")
    check(hvd.allgather_object(r * 10) == [k * 10 for k in range(n)], "allgather_object")
    evens = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    if r % 2 == 0:
        got = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=evens)
        close(got, torch.tensor([float(sum(range(0, n, 2)))]), "process set allreduce")
    hvd.remove_process_set(evens)
    try:
        hvd.allreduce_async(torch.ones(1), name="dup")
        hvd.allreduce_async(torch.ones(1), name="dup")
        check(False, "duplicate name accepted")
    except ValueError:
        pass
    hvd.barrier()
    check(0 <= hvd.join() < n, "join")
    hvd.shutdown()
    print("OK ops", flush=True)


def gradients_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    w = torch.tensor([2.0, 3.0], requires_grad=True)
    hvd.allreduce(w * w, op=hvd.Sum).sum().backward()
    close(w.grad, 2 * torch.tensor([2.0, 3.0]) * n, "allreduce gradient")
    z = torch.ones(r + 1, 2, requires_grad=True)
    (hvd.allgather(z) * 3.0).sum().backward()
    close(z.grad, torch.full([r + 1, 2], 3.0), "allgather gradient (averaged)")
    q = torch.ones(2, requires_grad=True)
    (hvd.broadcast(q, root_rank=0) * 2.0).sum().backward()
    close(q.grad, torch.full([2], 2.0 if r == 0 else 0.0), "broadcast gradient")
    hvd.shutdown()
    print("OK gradients", flush=True)


def _model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def _batches(rank, size, steps):
    g = torch.Generator().manual_seed(1234)
    data = [(torch.randn(size * 4, 4, generator=g), torch.randn(size * 4, 1, generator=g))
            for _ in range(steps)]
    return [(x[rank * 4:(rank + 1) * 4], y[rank * 4:(rank + 1) * 4]) for x, y in data], data


def train_scenario():
    """DistributedOptimizer: every rank ends with identical parameters, equal to one process
    training on the whole batch (mean loss over equal shards = average of shard gradients)."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    model = _model()
    if r != 0:
        for p in model.parameters():
            p.data.add_(1.0)  # broadcast_parameters must repair this
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine, whole = _batches(r, n, 5)
    for x, y in mine:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    reference = _model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for x, y in whole:
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = hvd.allgather(flat.unsqueeze(0))
    check(all(torch.equal(everyone[0], row) for row in everyone), "identical parameters")
    close(flat, torch.cat([p.detach().flatten() for p in reference.parameters()]),
          "matches single-process training", 1e-4)
    hvd.shutdown()
    print("OK train", flush=True)


def elastic_scenario():
    """hvd.elastic.run with TorchState and ElasticSampler over 2 epochs, committing every batch:
    every sample of every epoch is processed exactly once across the ranks, parameters agree.
    (The lost-host case is the elastic launcher's; see docs/elastic.md.)"""
    from allreduced.torch import elastic
    hvd.init()
    model = torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    sampler = elastic.ElasticSampler(list(range(12)), shuffle=True, seed=3)  # 12: no padding
    state = elastic.TorchState(model=model, optimizer=opt, sampler=sampler, epoch=0, seen=[])

    @elastic.run
    def train(state):
        for epoch in range(state.epoch, 2):
            for i, idx in enumerate(state.sampler):
                opt.zero_grad()
                model(torch.ones(1, 3) * idx).sum().backward()
                opt.step()
                state.seen.append((epoch, idx))
                state.sampler.record_batch(i, 1)
                state.commit()
            state.epoch = epoch + 1
            state.sampler.set_epoch(epoch + 1)
            state.commit()
        return state.seen

    seen = sorted(x for part in hvd.allgather_object(train(state)) for x in part)
    check(seen == sorted((e, i) for e in range(2) for i in range(12)), f"samples {seen}")
    weights = hvd.allgather(model.weight.detach())
    check(all(torch.equal(weights[0], w) for w in weights), "identical parameters")
    hvd.shutdown()
    print("OK elastic", flush=True)


if __name__ == "__main__":
    {"ops": ops_scenario, "gradients": gradients_scenario,
     "train": train_scenario, "elastic": elastic_scenario}[sys.argv[1]]()
