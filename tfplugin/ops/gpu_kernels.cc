// GPU kernels of the allreduced ops (issue 6), compiled only in CUDA builds (tfplugin/BUILD:
// if_cuda, with -DGOOGLE_CUDA=1 -DEIGEN_USE_GPU for this file only). Allreduce, broadcast and
// reducescatter (plain and grouped) of device tensors go through ard_submit_device: the input is
// copied into the client's staging arena on TensorFlow's compute stream, the daemon runs the
// collective with NCCL, and when COMPLETE
// arrives the client enqueues the copy into the output on the same stream, then done() runs. The
// host never waits for the GPU; ops TensorFlow enqueues on the stream after done() see the result.
// Device copies on this side per tensor: in and out (the daemon can only reach its staging arena,
// not TensorFlow's allocations); a broadcast copies in only at its root, and a root whose output
// was forwarded from its input copies nothing out.
//
// The stream is `ctx->eigen_gpu_device().stream()` (header-only, stable across TF 2.16-2.21),
// handed to the client library as an opaque pointer: this file links no CUDA library (the client
// dlopens libcuda), so the .so's NEEDED list is unchanged. The device is the CUDA ordinal as this
// process sees it (TensorFlow's platform device id, after CUDA_VISIBLE_DEVICES), which is what the
// client's cuDeviceGet expects.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "client/allreduced_client.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tfplugin/ops/global_client.h"
#include "tfplugin/ops/requests.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace ard::tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// One device submit, alive from submit until its completion callback has run. The output was
// allocated at submit (the client writes into it on the stream); the callback only reports.
struct DevicePending {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  ard_client* client;
  std::shared_ptr<std::atomic<int>> remaining;  // the last completion calls done
};

void OnDeviceComplete(void* user, uint64_t handle, const ard_result* result) {
  std::unique_ptr<DevicePending> p(static_cast<DevicePending*>(user));
  if (result->code != ARD_OK) p->ctx->SetStatus(ClientStatus(result->code, result->message));
  ard_release(p->client, handle);
  if (p->remaining->fetch_sub(1) == 1) p->done();
}

// CUDA ordinal of the op's GPU as this process numbers its devices, or -1.
int DeviceOrdinal(OpKernelContext* ctx) {
  const auto* info = ctx->device()->tensorflow_accelerator_device_info();
  return info == nullptr ? -1 : info->gpu_id;
}

// The output shape of `input`'s collective on this rank: the input's, except reducescatter's block
// of the first dimension (the first shape[0] % size ranks get one row more, as the daemon splits).
TensorShape OutputShape(int collective, const Tensor& input, const ard_topology& t) {
  TensorShape shape = input.shape();
  if (collective == ARD_REDUCESCATTER && shape.dims() > 0 && t.size > 0) {
    const int64_t rows = shape.dim_size(0);
    shape.set_dim(0, rows / t.size + (t.rank < rows % t.size ? 1 : 0));
  }
  return shape;
}

// A collective on N device tensors through ard_submit_device: N = 1 and no group for the plain
// ops; one atomic group for the grouped ones. Allreduce, broadcast and reducescatter, whose
// result size every rank knows before the daemon answers (allgather's first dimensions may differ
// between ranks, so it stays on the HostMemory path). Every tensor is submitted before any
// completes, as on the CPU. Empty inputs are not sent (the client refuses 0 bytes; their result
// is empty too).
template <int kCollective, bool kGrouped>
class GpuCollectiveOp : public AsyncOpKernel {
 public:
  explicit GpuCollectiveOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (kCollective == ARD_BROADCAST) {
      OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
    } else {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    }
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    if (kGrouped) OP_REQUIRES_OK(c, c->GetAttr("group_id", &group_id_));
    if (tensor_name_.empty()) tensor_name_ = name();
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const char* why = nullptr;
    ard_client* client = ProcessSetClient(process_set_, &why);
    OP_REQUIRES_ASYNC(ctx, client != nullptr, absl::FailedPreconditionError(why), done);
    const int device = DeviceOrdinal(ctx);
    OP_REQUIRES_ASYNC(ctx, device >= 0,
                      absl::InternalError("allreduced: the op's GPU has no CUDA ordinal"), done);
    void* stream = static_cast<void*>(ctx->eigen_gpu_device().stream());
    ard_topology topology;
    ard_client_topology(client, &topology);  // of the process set's job
    const int n = ctx->num_inputs();
    std::vector<Tensor*> outputs(n, nullptr);
    std::vector<int> to_send;
    for (int i = 0; i < n; ++i) {
      const Tensor& input = ctx->input(i);
      OP_REQUIRES_ASYNC(ctx, WireDtype(input.dtype()) != 0,
                        absl::InvalidArgumentError("allreduced does not support this dtype"), done);
      OP_REQUIRES_ASYNC(ctx, kCollective != ARD_REDUCESCATTER || input.dims() > 0,
                        absl::InvalidArgumentError("reducescatter needs at least one dimension"),
                        done);
      if (kCollective == ARD_REDUCESCATTER) {
        OP_REQUIRES_OK_ASYNC(
            ctx, ctx->allocate_output(i, OutputShape(kCollective, input, topology), &outputs[i]),
            done);
      } else {
        // In place when TensorFlow allows it: the copy-in precedes the copy-out on the stream.
        OP_REQUIRES_OK_ASYNC(
            ctx, ctx->forward_input_or_allocate_output({i}, i, input.shape(), &outputs[i]), done);
      }
      if (input.TotalBytes() > 0) to_send.push_back(i);
    }
    const int count = static_cast<int>(to_send.size());
    if (count == 0) {
      done();
      return;
    }
    auto remaining = std::make_shared<std::atomic<int>>(count);
    for (int k = 0; k < count; ++k) {
      const int i = to_send[k];
      std::vector<int64_t> shape;
      ard_request req;
      const std::string name = kGrouped ? tensor_name_ + "." + std::to_string(i) : tensor_name_;
      FillRequest(ctx->input(i), kCollective, name, &shape, &req);
      req.reduce_op = reduce_op_;
      req.root_rank = root_rank_;
      req.prescale = prescale_;
      req.postscale = postscale_;
      if (kGrouped) {
        req.group_id = group_id_;
        req.group_size = count;
      }
      auto* pending = new DevicePending{ctx, done, client, remaining};
      char err[512] = {};
      uint64_t handle = 0;
      // A rank whose reducescatter block is empty gets 0 bytes: any non-null pointer will do.
      void* out = outputs[i]->TotalBytes() > 0
                      ? const_cast<char*>(outputs[i]->tensor_data().data())
                      : const_cast<char*>(ctx->input(i).tensor_data().data());
      const int code = ard_submit_device(client, &req, device, out, stream, &OnDeviceComplete,
                                         pending, &handle, err, sizeof(err));
      if (code != ARD_OK) {
        // As on the CPU: the group can never complete; requests already sent complete on their
        // own with the job's next error, or at shutdown.
        delete pending;
        ctx->SetStatus(ClientStatus(code, err));
        if (remaining->fetch_sub(count - k) == count - k) done();
        return;
      }
    }
  }

 private:
  int reduce_op_ = ARD_SUM;
  int root_rank_ = 0;
  float prescale_ = 1.0f, postscale_ = 1.0f;
  int group_id_ = -1;
  int process_set_ = 0;
  std::string tensor_name_;
};

using ::tensorflow::DEVICE_GPU;
REGISTER_KERNEL_BUILDER(Name("AllreducedAllreduce").Device(DEVICE_GPU),
                        GpuCollectiveOp<ARD_ALLREDUCE, false>);
REGISTER_KERNEL_BUILDER(Name("AllreducedGroupedAllreduce").Device(DEVICE_GPU),
                        GpuCollectiveOp<ARD_ALLREDUCE, true>);
REGISTER_KERNEL_BUILDER(Name("AllreducedBroadcast").Device(DEVICE_GPU),
                        GpuCollectiveOp<ARD_BROADCAST, false>);
REGISTER_KERNEL_BUILDER(Name("AllreducedReducescatter").Device(DEVICE_GPU),
                        GpuCollectiveOp<ARD_REDUCESCATTER, false>);
REGISTER_KERNEL_BUILDER(Name("AllreducedGroupedReducescatter").Device(DEVICE_GPU),
                        GpuCollectiveOp<ARD_REDUCESCATTER, true>);

}  // namespace
}  // namespace ard::tf
