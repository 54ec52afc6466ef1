#include "tfplugin/ops/requests.h"

namespace ard::tf {

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
