"""Horovod's SyncBatchNorm: batch normalization whose batch statistics (mean and variance per
channel) are computed over the whole global batch, every rank's samples. In training each rank
sums its samples, their squares and its sample count per channel; one allreduce (Sum, through
the differentiable allreduce, so the gradient flows back to every rank's inputs through the
shared statistics) gives the global moments. Evaluation, or a job of one rank, is plain batch
norm with the running statistics."""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from allreduced.torch import basics
from allreduced.torch.autograd import allreduce
from allreduced.torch.process_sets import global_process_set


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d (any input of 2 or more dimensions, channels
    second), synchronised over `process_set`."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def _momentum(self):
        if not (self.training and self.track_running_stats):
            return 0.0
        self.num_batches_tracked.add_(1)
        if self.momentum is None:  # cumulative moving average
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def forward(self, x):
        self._check_input_dim(x)
        momentum = self._momentum() if self.num_batches_tracked is not None else (
            self.momentum or 0.0)
        use_batch = self.training or not self.track_running_stats
        if not use_batch or basics.size() == 1 or not self.process_set.included():
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                use_batch, momentum, self.eps)
        dims = [0] + list(range(2, x.dim()))
        count = torch.full([1], x.numel() // x.shape[1], dtype=x.dtype, device=x.device)
        moments = torch.cat([x.sum(dims), (x * x).sum(dims), count])
        total = allreduce(moments, op=basics.Sum, name=None, process_set=self.process_set)
        channels = x.shape[1]
        n = total[-1]
        mean = total[:channels] / n
        var = (total[channels:2 * channels] / n - mean * mean).clamp_min(0)
        if self.training and self.track_running_stats:
            with torch.no_grad():
                unbiased = var * (n / (n - 1).clamp_min(1))
                self.running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                self.running_var.mul_(1 - momentum).add_(unbiased.detach() * momentum)
        shape = [1, channels] + [1] * (x.dim() - 2)
        out = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out
