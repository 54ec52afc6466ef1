// In-place broadcast of resource variables (hvd.broadcast_): every variable gets root_rank's
// value, written straight into the variable's buffer, with no output tensor and no assign op.
// The variable's lock is held while taking a reference to its buffer (at submit) and while the
// result is written back (at completion), not across the wait.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/allreduced_client.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tfplugin/ops/global_client.h"
#include "tfplugin/ops/requests.h"

namespace ard::tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Var;

struct PendingVariable {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  ard_client* client;
  ::tensorflow::core::RefCountPtr<Var> var;
  std::shared_ptr<std::atomic<int>> remaining;
};

void OnVariableBroadcast(void* user, uint64_t handle, const ard_result* result) {
  std::unique_ptr<PendingVariable> p(static_cast<PendingVariable*>(user));
  OpKernelContext* ctx = p->ctx;
  if (result->code != ARD_OK) {
    ctx->SetStatus(ClientStatus(result->code, result->message));
  } else {
    ::tensorflow::mutex_lock lock(*p->var->mu());
    ::tensorflow::Tensor* value = p->var->tensor();
    if (value->TotalBytes() != result->bytes) {
      ctx->SetStatus(absl::FailedPreconditionError(
          "variable changed size during its broadcast_ (or the root's differs)"));
    } else {
      if (!value->RefCountIsOne()) {
        // Someone still reads the old buffer (copy-on-write): give the variable a fresh one.
        ::tensorflow::Tensor fresh;
        absl::Status s = ctx->allocate_temp(value->dtype(), value->shape(), &fresh);
        if (!s.ok()) ctx->SetStatus(s);
        if (s.ok()) *value = fresh;
      }
      if (ctx->status().ok() && result->bytes > 0) {
        std::memcpy(const_cast<char*>(value->tensor_data().data()), result->data, result->bytes);
      }
    }
  }
  ard_release(p->client, handle);
  if (p->remaining->fetch_sub(1) == 1) p->done();
}

class BroadcastInplaceOp : public AsyncOpKernel {
 public:
  explicit BroadcastInplaceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    if (tensor_name_.empty()) tensor_name_ = name();
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
    std::vector<::tensorflow::core::RefCountPtr<Var>> vars(n);
    for (int i = 0; i < n; ++i) {
      OP_REQUIRES_OK_ASYNC(ctx, LookupResource(ctx, HandleFromInput(ctx, i), &vars[i]), done);
      OP_REQUIRES_ASYNC(ctx, vars[i]->tensor()->IsInitialized(),
                        absl::FailedPreconditionError("broadcast_ of an uninitialized variable"),
                        done);
    }
    auto remaining = std::make_shared<std::atomic<int>>(n);
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> shape;
      ard_request req;
      const std::string name = tensor_name_ + "." + std::to_string(i);
      auto* pending = new PendingVariable{ctx, done, client, std::move(vars[i]), remaining};
      int code = 0;
      char err[512] = {};
      // A reference to the current buffer, taken under the lock: a concurrent assign then writes
      // a new buffer (copy-on-write) instead of this one while ard_submit copies it.
      ::tensorflow::Tensor snapshot;
      {
        ::tensorflow::tf_shared_lock lock(*pending->var->mu());
        snapshot = *pending->var->tensor();
      }
      FillRequest(snapshot, ARD_BROADCAST, name, &shape, &req);
      req.root_rank = root_rank_;
      if (req.dtype == 0) {
        code = ARD_INVALID_ARGUMENT;
        std::snprintf(err, sizeof(err), "allreduced does not support this dtype");
      } else {
        uint64_t handle = 0;
        code = ard_submit(client, &req, &OnVariableBroadcast, pending, &handle, err, sizeof(err));
      }
      if (code != ARD_OK) {
        delete pending;
        ctx->SetStatus(ClientStatus(code, err));
        if (remaining->fetch_sub(n - i) == n - i) done();
        return;
      }
    }
  }

 private:
  int root_rank_ = 0;
  int process_set_ = 0;
  std::string tensor_name_;
};

REGISTER_KERNEL_BUILDER(Name("AllreducedBroadcastInplace").Device(::tensorflow::DEVICE_CPU),
                        BroadcastInplaceOp);

}  // namespace
}  // namespace ard::tf
