// The op definitions (names, attributes, shape functions) of the allreduced TensorFlow ops; the
// kernels are in collective_kernels.cc. Every op takes `process_set_id` (0: all ranks).
#include <string>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::shape_inference::InferenceContext;

// The types each kind of collective takes: what can be reduced, and what can be moved.
const std::string kReducible = "{uint8, int8, int32, int64, half, bfloat16, float, double}";
const std::string kMovable =
    "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}";

// Every output is its input (allreduce, broadcast).
absl::Status SameAsInput(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

// Every output is its input with the first dimension unknown (allgather, reducescatter).
absl::Status FirstDimUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) {
    ::tensorflow::shape_inference::ShapeHandle out;
    TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(i), 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

// One scalar output (join, topology).
absl::Status ScalarOutput(InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("AllreducedAllreduce")
    .Attr("T: " + kReducible)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(SameAsInput);

REGISTER_OP("AllreducedAllgather")
    .Attr("T: " + kMovable)
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("gathered: T")
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("AllreducedBroadcast")
    .Attr("T: " + kMovable)
    .Attr("root_rank: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(SameAsInput);

REGISTER_OP("AllreducedAlltoall")
    .Attr("T: " + kMovable)
    .Attr("Tsplits: {int32, int64} = DT_INT64")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("splits: Tsplits")
    .Output("output: T")
    .Output("received_splits: int64")
    .SetShapeFn([](InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });

REGISTER_OP("AllreducedReducescatter")
    .Attr("T: " + kReducible)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("AllreducedBarrier")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs);

REGISTER_OP("AllreducedJoin")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Output("last_joined_rank: int32")
    .SetIsStateful()
    .SetShapeFn(ScalarOutput);

REGISTER_OP("AllreducedGroupedAllreduce")
    .Attr("T: list(" + kReducible + ")")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("group_id: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Output("reduced: T")
    .SetShapeFn(SameAsInput);

REGISTER_OP("AllreducedGroupedAllgather")
    .Attr("T: list(" + kMovable + ")")
    .Attr("group_id: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Output("gathered: T")
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("AllreducedGroupedReducescatter")
    .Attr("T: list(" + kReducible + ")")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("group_id: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Output("outputs: T")
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("AllreducedTopology")
    .Attr("index: int")
    .Output("value: int32")
    .SetIsStateful()  // never constant-folded: the value is the running process's
    .SetShapeFn(ScalarOutput);

// hvd.broadcast_: N resource variables take root_rank's values in place (no outputs).
REGISTER_OP("AllreducedBroadcastInplace")
    .Attr("N: int >= 0")
    .Attr("root_rank: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("variables: N * resource")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs);
