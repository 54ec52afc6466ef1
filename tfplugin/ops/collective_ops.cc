// TensorFlow ops that forward collectives to the host's allreduced daemon through the client
// library's C API (DESIGN.md "Thin framework coupling"). CPU kernels: the input is copied into the
// client's shared-memory arena at submit; the result is copied out of the daemon's result arena
// when the completion arrives (on the client's receiver thread), then the op finishes.
#include <cstring>
#include <string>

#include "client/allreduced_client.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tfplugin/ops/global_client.h"

namespace ard::tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

constexpr int kAllreduce = 1, kAllgather = 2, kBroadcast = 3;

int WireDtype(::tensorflow::DataType t) {
  switch (t) {
    case ::tensorflow::DT_UINT8: return 1;
    case ::tensorflow::DT_INT8: return 2;
    case ::tensorflow::DT_UINT16: return 3;
    case ::tensorflow::DT_INT16: return 4;
    case ::tensorflow::DT_INT32: return 5;
    case ::tensorflow::DT_INT64: return 6;
    case ::tensorflow::DT_HALF: return 7;
    case ::tensorflow::DT_BFLOAT16: return 8;
    case ::tensorflow::DT_FLOAT: return 9;
    case ::tensorflow::DT_DOUBLE: return 10;
    case ::tensorflow::DT_BOOL: return 11;
    default: return 0;
  }
}

// One submitted op, alive from submit until its completion callback has run.
struct Pending {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  ard_client* client;
  int collective;
};

void OnComplete(void* user, uint64_t handle, const ard_result* result) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(user));
  OpKernelContext* ctx = p->ctx;
  if (result->code != 0) {
    ctx->SetStatus(absl::Status(static_cast<absl::StatusCode>(result->code),
                                result->message ? result->message : "allreduced error"));
  } else {
    Tensor* out = nullptr;
    TensorShape shape;
    for (int d = 0; d < result->ndims; ++d) shape.AddDim(result->shape[d]);
    absl::Status s = ctx->allocate_output(0, shape, &out);
    if (s.ok() && out->TotalBytes() != result->bytes) {
      s = absl::InternalError("allreduced returned a result of unexpected size");
    }
    if (s.ok() && result->bytes > 0) {
      std::memcpy(const_cast<char*>(out->tensor_data().data()), result->data, result->bytes);
    }
    if (!s.ok()) ctx->SetStatus(s);
  }
  ard_release(p->client, handle);
  p->done();
}

class CollectiveOp : public AsyncOpKernel {
 public:
  CollectiveOp(OpKernelConstruction* c, int collective) : AsyncOpKernel(c), collective_(collective) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    if (tensor_name_.empty()) tensor_name_ = name();
    if (collective == kAllreduce) {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    }
    if (collective == kBroadcast) OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const char* why = nullptr;
    ard_client* client = GlobalClient(&why);
    OP_REQUIRES_ASYNC(ctx, client != nullptr, absl::FailedPreconditionError(why), done);
    const Tensor& input = ctx->input(0);
    const int dtype = WireDtype(input.dtype());
    OP_REQUIRES_ASYNC(ctx, dtype != 0,
                      absl::InvalidArgumentError("allreduced does not support this dtype"), done);
    std::vector<int64_t> shape(input.dims());
    for (int d = 0; d < input.dims(); ++d) shape[d] = input.dim_size(d);
    ard_request req;
    ard_request_init(&req);
    req.collective = collective_;
    req.dtype = dtype;
    req.reduce_op = reduce_op_;
    req.root_rank = root_rank_;
    req.prescale = prescale_;
    req.postscale = postscale_;
    req.name = tensor_name_.c_str();
    req.ndims = static_cast<int>(shape.size());
    req.shape = shape.data();
    req.data = input.tensor_data().data();
    req.bytes = input.TotalBytes();
    auto* pending = new Pending{ctx, done, client, collective_};
    char err[512] = {};
    uint64_t handle = 0;
    const int code = ard_submit(client, &req, &OnComplete, pending, &handle, err, sizeof(err));
    if (code != 0) {
      delete pending;
      ctx->SetStatus(absl::Status(static_cast<absl::StatusCode>(code), err));
      done();
    }
  }

 private:
  const int collective_;
  std::string tensor_name_;
  int reduce_op_ = 1;
  int root_rank_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

class AllreduceOp : public CollectiveOp {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : CollectiveOp(c, kAllreduce) {}
};
class AllgatherOp : public CollectiveOp {
 public:
  explicit AllgatherOp(OpKernelConstruction* c) : CollectiveOp(c, kAllgather) {}
};
class BroadcastOp : public CollectiveOp {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : CollectiveOp(c, kBroadcast) {}
};

REGISTER_KERNEL_BUILDER(Name("AllreducedAllreduce").Device(::tensorflow::DEVICE_CPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("AllreducedAllgather").Device(::tensorflow::DEVICE_CPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("AllreducedBroadcast").Device(::tensorflow::DEVICE_CPU), BroadcastOp);

}  // namespace
}  // namespace ard::tf

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("AllreducedAllreduce")
    .Attr("T: {uint8, int8, int32, int64, half, bfloat16, float, double}")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("AllreducedAllgather")
    .Attr("T: {uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}")
    .Attr("tensor_name: string = ''")
    .Input("tensor: T")
    .Output("gathered: T")
    .SetShapeFn([](InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      return absl::OkStatus();
    });

REGISTER_OP("AllreducedBroadcast")
    .Attr("T: {uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}")
    .Attr("root_rank: int")
    .Attr("tensor_name: string = ''")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });
