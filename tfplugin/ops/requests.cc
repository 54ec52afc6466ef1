#include "tfplugin/ops/requests.h"

namespace ard::tf {

int WireDtype(::tensorflow::DataType t) {
  switch (t) {
    case ::tensorflow::DT_UINT8: return ARD_UINT8;
    case ::tensorflow::DT_INT8: return ARD_INT8;
    case ::tensorflow::DT_UINT16: return ARD_UINT16;
    case ::tensorflow::DT_INT16: return ARD_INT16;
    case ::tensorflow::DT_INT32: return ARD_INT32;
    case ::tensorflow::DT_INT64: return ARD_INT64;
    case ::tensorflow::DT_HALF: return ARD_FLOAT16;
    case ::tensorflow::DT_BFLOAT16: return ARD_BFLOAT16;
    case ::tensorflow::DT_FLOAT: return ARD_FLOAT32;
    case ::tensorflow::DT_DOUBLE: return ARD_FLOAT64;
    case ::tensorflow::DT_BOOL: return ARD_BOOL;
    default: return 0;
  }
}

void FillRequest(const ::tensorflow::Tensor& input, int collective, const std::string& name,
                 std::vector<int64_t>* shape, ard_request* req) {
  shape->resize(input.dims());
  for (int d = 0; d < input.dims(); ++d) (*shape)[d] = input.dim_size(d);
  ard_request_init(req);
  req->collective = collective;
  req->dtype = WireDtype(input.dtype());
  req->name = name.c_str();
  req->ndims = static_cast<int>(shape->size());
  req->shape = shape->data();
  req->data = input.tensor_data().data();
  req->bytes = input.TotalBytes();
}

}  // namespace ard::tf
