// The op definitions (names, attributes, shape functions) of the allreduced TensorFlow ops; the
// kernels are in collective_kernels.cc. Every op takes `process_set_id` (0: all ranks).
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::shape_inference::InferenceContext;

// Every output is its input with the first dimension unknown (allgather, reducescatter).
absl::Status FirstDimUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) {
    ::tensorflow::shape_inference::ShapeHandle out;
    TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(i), 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("AllreducedAllreduce")
    .Attr("T: {uint8, int8, int32, int64, half, bfloat16, float, double}")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("AllreducedAllgather")
    .Attr("T: {uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
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
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("AllreducedAlltoall")
    .Attr("T: {uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}")
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
    .Attr("T: {uint8, int8, int32, int64, half, bfloat16, float, double}")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn([](InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      return absl::OkStatus();
    });

REGISTER_OP("AllreducedBarrier")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return absl::OkStatus(); });

REGISTER_OP("AllreducedJoin")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Output("last_joined_rank: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("AllreducedGroupedAllreduce")
    .Attr("T: list({uint8, int8, int32, int64, half, bfloat16, float, double})")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("group_id: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Output("reduced: T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    });

REGISTER_OP("AllreducedGroupedAllgather")
    .Attr("T: list({uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool})")
    .Attr("group_id: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Output("gathered: T")
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("AllreducedGroupedReducescatter")
    .Attr("T: list({uint8, int8, int32, int64, half, bfloat16, float, double})")
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
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    });

// hvd.broadcast_: N resource variables take root_rank's values in place (no outputs).
REGISTER_OP("AllreducedBroadcastInplace")
    .Attr("N: int >= 0")
    .Attr("root_rank: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("variables: N * resource")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return absl::OkStatus(); });
