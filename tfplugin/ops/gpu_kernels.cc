// GPU kernels of the allreduced ops (issue 6), compiled only in CUDA builds (tfplugin/BUILD:
// if_cuda, with -DGOOGLE_CUDA=1 -DEIGEN_USE_GPU for this file only). Allreduce and grouped
// allreduce of device tensors go through ard_submit_device: the input is copied into the client's
// staging arena on TensorFlow's compute stream, the daemon reduces it with NCCL, and when COMPLETE
// arrives the client enqueues the copy into the output on the same stream, then done() runs. The
// host never waits for the GPU; ops TensorFlow enqueues on the stream after done() see the result.
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
  if (result->code != 0) p->ctx->SetStatus(ClientStatus(result->code, result->message));
  ard_release(p->client, handle);
  if (p->remaining->fetch_sub(1) == 1) p->done();
}

// CUDA ordinal of the op's GPU as this process numbers its devices, or -1.
int DeviceOrdinal(OpKernelContext* ctx) {
  const auto* info = ctx->device()->tensorflow_accelerator_device_info();
  return info == nullptr ? -1 : info->gpu_id;
}

// Allreduce of N device tensors (N = 1 and no group for AllreducedAllreduce; one atomic group for
// AllreducedGroupedAllreduce). Every tensor is submitted before any completes, as on the CPU.
// Empty tensors are not sent (an allreduce of nothing is nothing; the client refuses 0 bytes).
class GpuAllreduceOp : public AsyncOpKernel {
 public:
  GpuAllreduceOp(OpKernelConstruction* c, bool grouped) : AsyncOpKernel(c), grouped_(grouped) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    if (grouped_) OP_REQUIRES_OK(c, c->GetAttr("group_id", &group_id_));
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
    const int n = ctx->num_inputs();
    std::vector<Tensor*> outputs(n, nullptr);
    std::vector<int> to_send;
    for (int i = 0; i < n; ++i) {
      OP_REQUIRES_ASYNC(ctx, WireDtype(ctx->input(i).dtype()) != 0,
                        absl::InvalidArgumentError("allreduced does not support this dtype"), done);
      // In place when TensorFlow allows it: the copy-in precedes the copy-out on the stream.
      OP_REQUIRES_OK_ASYNC(
          ctx, ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(), &outputs[i]),
          done);
      if (ctx->input(i).TotalBytes() > 0) to_send.push_back(i);
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
      const std::string name = grouped_ ? tensor_name_ + "." + std::to_string(i) : tensor_name_;
      FillRequest(ctx->input(i), kAllreduce, name, &shape, &req);
      req.reduce_op = reduce_op_;
      req.prescale = prescale_;
      req.postscale = postscale_;
      if (grouped_) {
        req.group_id = group_id_;
        req.group_size = count;
      }
      auto* pending = new DevicePending{ctx, done, client, remaining};
      char err[512] = {};
      uint64_t handle = 0;
      void* out = const_cast<char*>(outputs[i]->tensor_data().data());
      const int code = ard_submit_device(client, &req, device, out, stream, &OnDeviceComplete,
                                         pending, &handle, err, sizeof(err));
      if (code != 0) {
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
  const bool grouped_;
  int reduce_op_ = 1;
  float prescale_ = 1.0f, postscale_ = 1.0f;
  int group_id_ = -1;
  int process_set_ = 0;
  std::string tensor_name_;
};

class GpuAllreduce : public GpuAllreduceOp {
 public:
  explicit GpuAllreduce(OpKernelConstruction* c) : GpuAllreduceOp(c, false) {}
};

class GpuGroupedAllreduce : public GpuAllreduceOp {
 public:
  explicit GpuGroupedAllreduce(OpKernelConstruction* c) : GpuAllreduceOp(c, true) {}
};

REGISTER_KERNEL_BUILDER(Name("AllreducedAllreduce").Device(::tensorflow::DEVICE_GPU), GpuAllreduce);
REGISTER_KERNEL_BUILDER(Name("AllreducedGroupedAllreduce").Device(::tensorflow::DEVICE_GPU),
                        GpuGroupedAllreduce);

}  // namespace
}  // namespace ard::tf
