"""One rank of the PyTorch elastic job of elastic_test.py: hvd.elastic.run with TorchState and
ElasticSampler over EPOCHS epochs of a 96-sample data set, 2 samples per rank per step, a commit
after every step. The model is a small regression model plus a `visits` vector with one entry per
sample: each sample's loss term adds exactly 1 to its entry (summed gradients, SGD with lr 1),
so at the end `visits` says how often each sample went into a committed step: EPOCHS everywhere
means no sample was repeated or skipped, whatever ranks were lost on the way.

Environment: EPOCHS (2), SLEEP_S (per step, 0.1). Prints "STEP <epoch> <step> <rank> <size>",
"RESUMED <size>" at the first step after each reset, and at the end
"FINAL <rank> <size> <visits json> <parameters json>"."""
import json
import os
import time

import torch

import allreduced.torch as hvd

SAMPLES = 96  # with 6 ranks x 2 per step, what is left of an epoch always splits among 4 ranks
EPOCHS = int(os.environ.get("EPOCHS", "2"))
SLEEP_S = float(os.environ.get("SLEEP_S", "0.1"))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.visits = torch.nn.Parameter(torch.zeros(SAMPLES, dtype=torch.float64))

    def loss(self, inputs, targets, indices):
        fit = torch.nn.functional.mse_loss(self.linear(inputs), targets, reduction="sum")
        return 0.001 * fit - self.visits[indices].sum()  # d/d visits[i] = -1 per sample i


def main():
    hvd.init()
    torch.manual_seed(0)
    inputs = torch.randn(SAMPLES, 4)
    targets = inputs.sum(1, keepdim=True)
    model = Model()
    # Sum, not Average: each rank's samples add their own 1 to `visits` whatever the job's size.
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                         named_parameters=model.named_parameters(), op=hvd.Sum)
    sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=7)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0)
    resumed = [False]
    state.register_reset_callbacks([lambda: resumed.__setitem__(0, True)])

    @hvd.elastic.run
    def train(state):
        while state.epoch < EPOCHS:
            batches = torch.utils.data.DataLoader(list(state.sampler), batch_size=2)
            for step, indices in enumerate(batches):
                optimizer.zero_grad()
                model.loss(inputs[indices], targets[indices], indices).backward()
                optimizer.step()
                if resumed[0]:
                    resumed[0] = False
                    print(f"RESUMED {hvd.size()}", flush=True)
                print(f"STEP {state.epoch} {step} {hvd.rank()} {hvd.size()}", flush=True)
                state.sampler.record_batch(step, len(indices))
                state.commit()
                time.sleep(SLEEP_S)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    params = torch.cat([p.detach().reshape(-1).double() for p in model.linear.parameters()])
    print(f"FINAL {hvd.rank()} {hvd.size()} {json.dumps(model.visits.detach().tolist())} "
          f"{json.dumps(params.tolist())}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
