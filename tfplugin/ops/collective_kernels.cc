// TensorFlow op kernels that forward collectives to the host's allreduced daemon through the client
// library's C API (DESIGN.md "Thin framework coupling"). CPU kernels: the input is copied into the
// client's shared-memory arena at submit; the result is copied out of the daemon's result arena
// when the completion arrives (on the client's receiver thread), then the op finishes.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "client/allreduced_client.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tfplugin/ops/global_client.h"
#include "tfplugin/ops/requests.h"

namespace ard::tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// One submitted op, alive from submit until its completion callback has run.
struct Pending {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  ard_client* client;
  int collective;
  int output = 0;  // which output this request fills (grouped ops)
  // Grouped ops: requests still outstanding; the last completion calls done.
  std::shared_ptr<std::atomic<int>> remaining;
};

void OnComplete(void* user, uint64_t handle, const ard_result* result) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(user));
  OpKernelContext* ctx = p->ctx;
  if (result->code != ARD_OK) {
    ctx->SetStatus(ClientStatus(result->code, result->message));
  } else if (p->collective == ARD_JOIN) {
    Tensor* out = nullptr;
    absl::Status s = ctx->allocate_output(0, TensorShape({}), &out);
    if (s.ok()) out->scalar<int32_t>()() = result->join_last_rank;
    if (!s.ok()) ctx->SetStatus(s);
  } else if (p->collective != ARD_BARRIER) {
    Tensor* out = nullptr;
    TensorShape shape;
    for (int d = 0; d < result->ndims; ++d) shape.AddDim(result->shape[d]);
    absl::Status s = ctx->allocate_output(p->output, shape, &out);
    if (s.ok() && out->TotalBytes() != result->bytes) {
      s = absl::InternalError("allreduced returned a result of unexpected size");
    }
    if (s.ok() && result->bytes > 0) {
      std::memcpy(const_cast<char*>(out->tensor_data().data()), result->data, result->bytes);
    }
    if (s.ok() && p->collective == ARD_ALLTOALL) {
      Tensor* splits = nullptr;
      s = ctx->allocate_output(1, TensorShape({result->num_splits}), &splits);
      for (int i = 0; s.ok() && i < result->num_splits; ++i) {
        splits->vec<int64_t>()(i) = result->splits[i];
      }
    }
    if (!s.ok()) ctx->SetStatus(s);
  }
  ard_release(p->client, handle);
  if (p->remaining == nullptr || p->remaining->fetch_sub(1) == 1) p->done();
}

class CollectiveOp : public AsyncOpKernel {
 public:
  CollectiveOp(OpKernelConstruction* c, int collective)
      : AsyncOpKernel(c), collective_(collective) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    if (tensor_name_.empty()) tensor_name_ = name();
    if (collective == ARD_ALLREDUCE || collective == ARD_REDUCESCATTER) {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    }
    if (collective == ARD_BROADCAST) OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const char* why = nullptr;
    ard_client* client = ProcessSetClient(process_set_, &why);
    OP_REQUIRES_ASYNC(ctx, client != nullptr, absl::FailedPreconditionError(why), done);
    std::vector<int64_t> shape;
    std::vector<int64_t> splits;
    ard_request req;
    const bool tensorless = collective_ == ARD_BARRIER || collective_ == ARD_JOIN;
    if (tensorless) {
      ard_request_init(&req);
      req.collective = collective_;
      req.name = tensor_name_.c_str();
    } else {
      const Tensor& input = ctx->input(0);
      FillRequest(input, collective_, tensor_name_, &shape, &req);
      OP_REQUIRES_ASYNC(ctx, req.dtype != 0,
                        absl::InvalidArgumentError("allreduced does not support this dtype"), done);
    }
    req.reduce_op = reduce_op_;
    req.root_rank = root_rank_;
    req.prescale = prescale_;
    req.postscale = postscale_;
    if (collective_ == ARD_ALLTOALL && ctx->num_inputs() > 1 && ctx->input(1).NumElements() > 0) {
      const Tensor& s = ctx->input(1);
      for (int64_t i = 0; i < s.NumElements(); ++i) {
        splits.push_back(s.dtype() == ::tensorflow::DT_INT32 ? s.flat<int32_t>()(i)
                                                             : s.flat<int64_t>()(i));
      }
      req.num_splits = static_cast<int>(splits.size());
      req.splits = splits.data();
    }
    auto* pending = new Pending{ctx, done, client, collective_};
    char err[512] = {};
    uint64_t handle = 0;
    const int code = ard_submit(client, &req, &OnComplete, pending, &handle, err, sizeof(err));
    if (code != ARD_OK) {
      delete pending;
      ctx->SetStatus(ClientStatus(code, err));
      done();
    }
  }

 private:
  const int collective_;
  std::string tensor_name_;
  int process_set_ = 0;
  int reduce_op_ = ARD_SUM;
  int root_rank_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

// One kernel class per collective, differing only in which collective it submits.
template <int kCollective>
class Op : public CollectiveOp {
 public:
  explicit Op(OpKernelConstruction* c) : CollectiveOp(c, kCollective) {}
};

// 31-bit FNV-1a of `name`: the same on every rank and build (std::hash promises neither).
int NameHash(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char ch : name) h = (h ^ ch) * 16777619u;
  return static_cast<int>(h & 0x7FFFFFFFu);
}

// N tensors as one atomic group (the daemon negotiates them together): grouped allreduce,
// allgather or reducescatter. All requests are submitted before any completes, so eager execution
// cannot deadlock on a partial group.
template <int kCollective>
class GroupedOp : public AsyncOpKernel {
 public:
  explicit GroupedOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (kCollective != ARD_ALLGATHER) {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    }
    OP_REQUIRES_OK(c, c->GetAttr("group_id", &group_id_));
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    if (tensor_name_.empty()) {
      // An unnamed group takes the op's name and an id derived from it, so ranks agree on both
      // whatever groups each built before (Python's per-process numbering would not).
      tensor_name_ = name();
      if (group_id_ < 0) group_id_ = NameHash(tensor_name_);
    }
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const char* why = nullptr;
    ard_client* client = ProcessSetClient(process_set_, &why);
    OP_REQUIRES_ASYNC(ctx, client != nullptr, absl::FailedPreconditionError(why), done);
    const int n = ctx->num_inputs();
    if (n == 0) {
      done();
      return;
    }
    // Refused before anything is submitted: a partly submitted group would leave the other
    // ranks waiting for its missing tensors.
    for (int i = 0; kCollective == ARD_REDUCESCATTER && i < n; ++i) {
      OP_REQUIRES_ASYNC(
          ctx, ctx->input(i).dims() > 0,
          absl::InvalidArgumentError("reducescatter needs tensors of rank 1 or more (tensor " +
                                     std::to_string(i) + " of the group is a scalar)"),
          done);
    }
    auto remaining = std::make_shared<std::atomic<int>>(n);
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> shape;
      ard_request req;
      const std::string name = tensor_name_ + "." + std::to_string(i);
      FillRequest(ctx->input(i), kCollective, name, &shape, &req);
      OP_REQUIRES_ASYNC(ctx, req.dtype != 0,
                        absl::InvalidArgumentError("allreduced does not support this dtype"), done);
      req.reduce_op = reduce_op_;
      req.prescale = prescale_;
      req.postscale = postscale_;
      req.group_id = group_id_;
      req.group_size = n;
      auto* pending = new Pending{ctx, done, client, kCollective, i, remaining};
      char err[512] = {};
      uint64_t handle = 0;
      const int code = ard_submit(client, &req, &OnComplete, pending, &handle, err, sizeof(err));
      if (code != ARD_OK) {
        // The group can never complete; fail the op (requests already sent complete on their own
        // with the job's next error, or linger until shutdown).
        delete pending;
        ctx->SetStatus(ClientStatus(code, err));
        if (remaining->fetch_sub(n - i) == n - i) done();
        return;
      }
    }
  }

 private:
  int reduce_op_ = ARD_SUM;
  float prescale_ = 1.0f, postscale_ = 1.0f;
  int group_id_ = -1;
  int process_set_ = 0;
  std::string tensor_name_;
};

// rank, size, local_rank or local_size (attr `index` 0..3) of this process, read when the op runs,
// so graphs built before init() (or saved and restored) see the process's real place.
class TopologyOp : public ::tensorflow::OpKernel {
 public:
  explicit TopologyOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("index", &index_));
    OP_REQUIRES(c, index_ >= 0 && index_ < 4, absl::InvalidArgumentError("index must be 0..3"));
  }

  void Compute(OpKernelContext* ctx) override {
    const char* why = nullptr;
    ard_client* client = ProcessSetClient(0, &why);
    OP_REQUIRES(ctx, client != nullptr, absl::FailedPreconditionError(why));
    ard_topology t;
    ard_client_topology(client, &t);
    const int values[4] = {t.rank, t.size, t.local_rank, t.local_size};
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = values[index_];
  }

 private:
  int index_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("AllreducedTopology").Device(::tensorflow::DEVICE_CPU), TopologyOp);
REGISTER_KERNEL_BUILDER(Name("AllreducedAllreduce").Device(::tensorflow::DEVICE_CPU),
                        Op<ARD_ALLREDUCE>);
REGISTER_KERNEL_BUILDER(Name("AllreducedAllgather").Device(::tensorflow::DEVICE_CPU),
                        Op<ARD_ALLGATHER>);
REGISTER_KERNEL_BUILDER(Name("AllreducedBroadcast").Device(::tensorflow::DEVICE_CPU),
                        Op<ARD_BROADCAST>);
REGISTER_KERNEL_BUILDER(Name("AllreducedAlltoall").Device(::tensorflow::DEVICE_CPU),
                        Op<ARD_ALLTOALL>);
REGISTER_KERNEL_BUILDER(Name("AllreducedReducescatter").Device(::tensorflow::DEVICE_CPU),
                        Op<ARD_REDUCESCATTER>);
REGISTER_KERNEL_BUILDER(Name("AllreducedBarrier").Device(::tensorflow::DEVICE_CPU),
                        Op<ARD_BARRIER>);
REGISTER_KERNEL_BUILDER(Name("AllreducedJoin").Device(::tensorflow::DEVICE_CPU), Op<ARD_JOIN>);
REGISTER_KERNEL_BUILDER(Name("AllreducedGroupedAllreduce").Device(::tensorflow::DEVICE_CPU),
                        GroupedOp<ARD_ALLREDUCE>);
REGISTER_KERNEL_BUILDER(Name("AllreducedGroupedAllgather").Device(::tensorflow::DEVICE_CPU),
                        GroupedOp<ARD_ALLGATHER>);
REGISTER_KERNEL_BUILDER(Name("AllreducedGroupedReducescatter").Device(::tensorflow::DEVICE_CPU),
                        GroupedOp<ARD_REDUCESCATTER>);

#ifdef ARD_TF_GPU_KERNELS
// GPU placements of the ops without a device path: TensorFlow stages their tensors through host
// memory and these CPU kernels run them (allgather: ranks' first dimensions may differ, which the
// device path refuses; alltoall: not served for device tensors). Allreduce, broadcast and
// reducescatter have real GPU kernels (gpu_kernels.cc); broadcast_ of GPU variables goes through
// broadcast + assign in Python (collectives.py).
using ::tensorflow::DEVICE_GPU;
REGISTER_KERNEL_BUILDER(
    Name("AllreducedAllgather").Device(DEVICE_GPU).HostMemory("tensor").HostMemory("gathered"),
    Op<ARD_ALLGATHER>);
REGISTER_KERNEL_BUILDER(Name("AllreducedAlltoall")
                            .Device(DEVICE_GPU)
                            .HostMemory("tensor")
                            .HostMemory("splits")
                            .HostMemory("output")
                            .HostMemory("received_splits"),
                        Op<ARD_ALLTOALL>);
REGISTER_KERNEL_BUILDER(Name("AllreducedGroupedAllgather")
                            .Device(DEVICE_GPU)
                            .HostMemory("tensors")
                            .HostMemory("gathered"),
                        GroupedOp<ARD_ALLGATHER>);
REGISTER_KERNEL_BUILDER(Name("AllreducedBarrier").Device(DEVICE_GPU), Op<ARD_BARRIER>);
REGISTER_KERNEL_BUILDER(Name("AllreducedJoin").Device(DEVICE_GPU).HostMemory("last_joined_rank"),
                        Op<ARD_JOIN>);
REGISTER_KERNEL_BUILDER(Name("AllreducedTopology").Device(DEVICE_GPU).HostMemory("value"),
                        TopologyOp);
#endif  // ARD_TF_GPU_KERNELS

}  // namespace
}  // namespace ard::tf
