"""The main job's PyTorch training (tools/main_job.sh): a small model trained with
allreduced.torch's DistributedOptimizer on data it generates (each rank its own shard); rank 0
prints each epoch's loss averaged over the ranks; the end checks that every rank holds
bit-identical parameters.

    python -m allreduced.launch --sockets A.sock,B.sock -np 4 -- python train_torch.py
"""
import torch

import allreduced.torch as hvd


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(rank)  # different starting parameters: the broadcast aligns them
    # A two-class problem: points inside or outside a sphere; each rank gets its own samples.
    data = torch.randn(2048, 8)
    labels = (data.norm(dim=1, keepdim=True) > 8 ** 0.5).float()
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.003 * size),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for epoch in range(5):
        total = torch.zeros(1)
        for start in range(0, len(data), 64):
            optimizer.zero_grad()
            loss = loss_fn(model(data[start:start + 64]), labels[start:start + 64])
            loss.backward()
            optimizer.step()
            total += loss.detach()
        mean = hvd.allreduce(total / (len(data) // 64), name="epoch.loss")
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {mean.item():.4f}", flush=True)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = hvd.allgather(flat[None, :], name="final.parameters")
    if not torch.equal(everyone, flat.expand_as(everyone)):
        raise SystemExit("parameters differ between ranks")
    if rank == 0:
        print(f"parameters identical on all {size} ranks ({flat.numel()} parameters)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
