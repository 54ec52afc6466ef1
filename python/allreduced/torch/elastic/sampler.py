"""ElasticSampler: a torch Sampler that splits a dataset's indices among the ranks of the current
generation of an elastic job and, after a reset (a rank lost or joined), splits the indices not
yet processed in this epoch among the new ranks, so an epoch neither repeats nor skips samples.

Use it as Horovod's: keep it in a TorchState (it is saved, restored and synced with the state),
call record_batch(batch_idx, batch_size) after each batch and set_epoch(epoch + 1) at the end of
an epoch. Indices are shuffled with `seed + epoch`, the same on every rank."""
import math
import random

import torch.utils.data

from allreduced.torch import basics


class ElasticSampler(torch.utils.data.Sampler):

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # samples of this epoch processed by all ranks together
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` (call at the end of the previous one)."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank processed `batch_size` more samples."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_num = state["processed_num"]
        self.reset()

    def reset(self):
        """Re-splits the epoch's remaining indices among the job's current ranks."""
        self.num_replicas = basics.size() if basics.is_initialized() else 1
        self.rank = basics.rank() if basics.is_initialized() else 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        # Padded with the first indices so that every rank gets as many (as DistributedSampler).
        padded = self.remaining_indices + self.remaining_indices[
            :self.total_size - len(self.remaining_indices)]
        return iter(padded[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
