// Request validation, SUBMIT encoding and COMPLETE/ERROR decoding.
#include <cstring>
#include <string>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/request_codec.h"

namespace ard::client {
namespace {

struct Tensor {
  Tensor() {
    ard_request_init(&r);
    r.collective = ARD_ALLREDUCE;
    r.dtype = ARD_FLOAT32;
    r.reduce_op = ARD_AVERAGE;
    r.name = "layer1/kernel";
    r.ndims = 2;
    r.shape = shape;
    r.data = data;
    r.bytes = sizeof(data);
  }
  int64_t shape[2] = {2, 3};
  float data[6] = {};
  ard_request r;
};

wire::Code Validate(const ard_request& r, uint64_t max = wire::kMaxTensorBytes) {
  return ValidateRequest(r, max).code();
}

TEST_CASE("valid requests pass, including scalars, empty tensors, barrier and join") {
  Tensor t;
  CHECK(Validate(t.r) == wire::Code::kOk);
  ard_request scalar = t.r;
  scalar.ndims = 0;
  scalar.bytes = 4;
  CHECK(Validate(scalar) == wire::Code::kOk);
  int64_t empty_shape[1] = {0};
  ard_request empty = t.r;
  empty.ndims = 1;
  empty.shape = empty_shape;
  empty.bytes = 0;
  empty.data = nullptr;
  CHECK(Validate(empty) == wire::Code::kOk);
  ard_request barrier;
  ard_request_init(&barrier);
  barrier.collective = ARD_BARRIER;
  barrier.name = "b";
  CHECK(Validate(barrier) == wire::Code::kOk);
  barrier.collective = ARD_JOIN;
  CHECK(Validate(barrier) == wire::Code::kOk);
  barrier.bytes = 4;
  barrier.data = t.data;
  CHECK(Validate(barrier) == wire::Code::kInvalidArgument);  // join takes no data
}

TEST_CASE("the byte count must match the shape and dtype") {
  Tensor t;
  t.r.bytes = 20;
  Status status = ValidateRequest(t.r, wire::kMaxTensorBytes);
  CHECK(status.code() == wire::Code::kInvalidArgument);
  CHECK(status.message() ==
        "tensor 'layer1/kernel': bytes 20 != shape [2, 3] x 4-byte elements = 24");
  t.r.bytes = 24;
  t.shape[0] = -2;
  CHECK(Validate(t.r) == wire::Code::kInvalidArgument);
  t.shape[0] = INT64_MAX;
  CHECK(Validate(t.r) == wire::Code::kInvalidArgument);  // overflow
}

TEST_CASE("tensors up to the limit pass; above it they fail") {
  Tensor t;
  CHECK(Validate(t.r, 24) == wire::Code::kOk);
  CHECK(Validate(t.r, 23) == wire::Code::kInvalidArgument);
}

TEST_CASE("alltoall splits must be non-negative and sum to the first dimension") {
  Tensor t;
  t.r.collective = ARD_ALLTOALL;
  int64_t splits[2] = {1, 1};
  t.r.splits = splits;
  t.r.num_splits = 2;
  CHECK(Validate(t.r) == wire::Code::kOk);
  splits[1] = 2;
  CHECK(Validate(t.r) == wire::Code::kInvalidArgument);
  splits[0] = -1;
  splits[1] = 3;
  CHECK(Validate(t.r) == wire::Code::kInvalidArgument);
  t.r.splits = nullptr;
  CHECK(Validate(t.r) == wire::Code::kInvalidArgument);
}

TEST_CASE("broadcast needs a root; grouped allreduce needs a size; scales are finite") {
  Tensor t;
  t.r.collective = ARD_BROADCAST;
  t.r.root_rank = -1;
  CHECK(Validate(t.r) == wire::Code::kInvalidArgument);
  t.r.root_rank = 0;
  CHECK(Validate(t.r) == wire::Code::kOk);
  Tensor g;
  g.r.group_id = 4;
  CHECK(Validate(g.r) == wire::Code::kInvalidArgument);
  g.r.group_size = 3;
  CHECK(Validate(g.r) == wire::Code::kOk);
  g.r.prescale = 1.0 / 0.0;
  CHECK(Validate(g.r) == wire::Code::kInvalidArgument);
}

TEST_CASE("EncodeSubmit fills every field") {
  Tensor t;
  t.r.prescale = 0.5;
  t.r.root_rank = 2;
  InputArena::Slot slot{3, 4096, 64, nullptr};
  wire::Submit s;
  EncodeSubmit(t.r, slot, &s);
  CHECK(s.collective == 1);
  CHECK(s.dtype == 9);
  CHECK(s.reduce_op == 2);
  CHECK(s.root_rank == 2);
  CHECK(s.prescale == 0.5);
  CHECK(s.postscale == 1.0);
  CHECK(std::string(s.name) == "layer1/kernel");
  CHECK(s.ndims == 2);
  CHECK(s.shape[0] == 2);
  CHECK(s.shape[1] == 3);
  CHECK(s.shape[2] == 0);
  CHECK(s.segment == 3);
  CHECK(s.offset == 4096);
  CHECK(s.bytes == 24);
  CHECK(s.group_id == -1);
  CHECK(s.group_size == 0);
  CHECK(s.num_splits == 0);
  CHECK(s.reserved == 0);
}

std::string CompletePayload(const wire::Complete& c, const std::string& tail) {
  return std::string(reinterpret_cast<const char*>(&c), sizeof(c)) + tail;
}

TEST_CASE("DecodeComplete checks lengths against counts") {
  wire::Complete c{};
  c.num_splits = 2;
  c.message_bytes = 3;
  int64_t splits[2] = {5, 6};
  std::string tail(reinterpret_cast<const char*>(splits), sizeof(splits));
  std::string good = CompletePayload(c, tail + "err");
  DecodedComplete out;
  REQUIRE(DecodeComplete(good.data(), good.size(), &out).ok());
  CHECK(out.splits == std::vector<int64_t>{5, 6});
  CHECK(out.message == "err");
  CHECK(DecodeComplete(good.data(), good.size() - 1, &out).code() == wire::Code::kInternal);
  c.ndims = 9;
  std::string bad = CompletePayload(c, tail + "err");
  CHECK(DecodeComplete(bad.data(), bad.size(), &out).code() == wire::Code::kInternal);
}

TEST_CASE("DecodeError reads code and message") {
  wire::Error e{10, 4};
  std::string payload = std::string(reinterpret_cast<const char*>(&e), sizeof(e)) + "dead";
  int32_t code;
  std::string message;
  REQUIRE(DecodeError(payload.data(), payload.size(), &code, &message).ok());
  CHECK(code == ARD_ABORTED);
  CHECK(message == "dead");
  CHECK_FALSE(DecodeError(payload.data(), payload.size() + 0 - 1, &code, &message).ok());
}

}  // namespace
}  // namespace ard::client
