#include "daemon/negotiation/response_codec.h"

#include <algorithm>
#include <cstring>

#include "catch2/catch.hpp"
#include "daemon/negotiation/meta_convert.h"
#include "daemon/negotiation/validation.h"

namespace ard::negotiation {
namespace {

using wire::Collective;
using wire::DataType;

TensorRequest Req(int rank, Collective c, std::vector<int64_t> shape,
                  DataType dtype = DataType::kFloat32) {
  TensorRequest r;
  r.rank = rank;
  r.meta.collective = static_cast<uint32_t>(c);
  r.meta.dtype = static_cast<uint32_t>(dtype);
  r.meta.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
  r.meta.prescale = r.meta.postscale = 1.0;
  r.meta.group_id = -1;
  std::strncpy(r.meta.name, "grad/w", sizeof(r.meta.name) - 1);
  if (c == Collective::kBarrier || c == Collective::kJoin) return r;
  r.meta.ndims = shape.size();
  uint64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) n *= r.meta.shape[i] = shape[i];
  r.meta.bytes = n * wire::DataTypeSize(r.meta.dtype);
  return r;
}

// `size` ranks of `make(rank)`, those of `absent` not taking part.
template <typename Make>
ReadyTensor Tensor(int size, Make make, std::vector<int> absent = {}) {
  ReadyTensor t{"grad/w", std::vector<RankEntry>(size)};
  for (int r = 0; r < size; ++r) {
    if (std::find(absent.begin(), absent.end(), r) == absent.end()) t.ranks[r] = make(r);
  }
  return t;
}

CollectiveResponse::Tensor Encode(const ReadyTensor& t) {
  CollectiveResponse::Tensor out;
  EncodeTensor(t, &out);
  return out;
}

// Decodes `t`'s encoding (after a trip through its bytes) and checks it is `t` again: the same
// ranks take part, each with the same metadata as it travels (ToMeta).
ReadyTensor RoundTrip(const ReadyTensor& t) {
  CollectiveResponse::Tensor wire;
  REQUIRE(wire.ParseFromString(Encode(t).SerializeAsString()));
  auto decoded = DecodeTensor(wire, static_cast<int>(t.ranks.size()));
  REQUIRE(decoded.ok());
  CHECK(decoded->name == t.name);
  REQUIRE(decoded->ranks.size() == t.ranks.size());
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    REQUIRE(decoded->ranks[r].has_value() == t.ranks[r].has_value());
    if (!t.ranks[r]) continue;
    CHECK(decoded->ranks[r]->rank == static_cast<int>(r));
    CHECK(ToMeta(*decoded->ranks[r]).SerializeAsString() ==
          ToMeta(*t.ranks[r]).SerializeAsString());
  }
  return *std::move(decoded);
}

TEST_CASE("an allreduce's metadata travels once, whatever the number of ranks") {
  auto make = [](int r) { return Req(r, Collective::kAllreduce, {1024, 3}); };
  const CollectiveResponse::Tensor small = Encode(Tensor(8, make));
  const CollectiveResponse::Tensor large = Encode(Tensor(1000, make));
  CHECK(large.ByteSizeLong() == small.ByteSizeLong());
  CHECK(large.ByteSizeLong() < 64);
  CHECK(large.absent_ranks_size() == 0);
  CHECK(large.others_size() == 0);
  CHECK(large.first_dims_size() + large.bytes_size() + large.splits_size() + large.gpu_size() == 0);
  RoundTrip(Tensor(1000, make));
}

TEST_CASE("every collective round-trips") {
  for (Collective c : {Collective::kAllreduce, Collective::kAllgather, Collective::kBroadcast,
                       Collective::kAlltoall, Collective::kReducescatter, Collective::kBarrier,
                       Collective::kJoin}) {
    INFO("collective " << CollectiveName(c));
    RoundTrip(Tensor(5, [c](int r) {
      TensorRequest q = Req(r, c, {10, 2});
      if (c == Collective::kBroadcast) q.meta.root_rank = 3;
      if (c == Collective::kAllreduce) q.meta.prescale = 0.5;
      return q;
    }));
  }
}

TEST_CASE("joined ranks travel as the absent list and decode as not taking part") {
  const ReadyTensor t =
      Tensor(6, [](int r) { return Req(r, Collective::kAllreduce, {4}); }, {1, 4});
  const CollectiveResponse::Tensor wire = Encode(t);
  CHECK(std::vector<int>(wire.absent_ranks().begin(), wire.absent_ranks().end()) ==
        std::vector<int>{1, 4});
  const ReadyTensor decoded = RoundTrip(t);
  CHECK(!decoded.ranks[1]);
  CHECK(!decoded.ranks[4]);
  CHECK(decoded.first().rank == 0);
  // The lowest taking-part rank may be a later one; nobody taking part round-trips too.
  RoundTrip(Tensor(3, [](int r) { return Req(r, Collective::kAllreduce, {4}); }, {0}));
  RoundTrip(Tensor(3, [](int r) { return Req(r, Collective::kAllreduce, {4}); }, {0, 1, 2}));
}

TEST_CASE("allgather's different first dimensions travel as columns, the rest once") {
  const ReadyTensor t = Tensor(4, [](int r) { return Req(r, Collective::kAllgather, {r + 1, 7}); });
  const CollectiveResponse::Tensor wire = Encode(t);
  CHECK(std::vector<int64_t>(wire.first_dims().begin(), wire.first_dims().end()) ==
        std::vector<int64_t>{1, 2, 3, 4});
  CHECK(wire.bytes_size() == 4);
  CHECK(wire.others_size() == 0);
  CHECK(wire.splits_size() == 0);
  const ReadyTensor decoded = RoundTrip(t);
  CHECK(decoded.ranks[2]->meta.shape[0] == 3);
  CHECK(decoded.ranks[2]->meta.shape[1] == 7);
  CHECK(ValidateReadyTensor(decoded, 4).ok());
}

TEST_CASE("alltoall's per-rank splits and a mixed GPU flag travel as columns") {
  const ReadyTensor t = Tensor(3, [](int r) {
    TensorRequest q = Req(r, Collective::kAlltoall, {6});
    q.splits = {r, 6 - 2 * r, r};
    q.meta.num_splits = 3;
    if (r == 1) q.gpu = wire::GpuPlacement{};
    return q;
  });
  const CollectiveResponse::Tensor wire = Encode(t);
  CHECK(wire.splits_size() == 9);
  CHECK(wire.gpu_size() == 3);
  CHECK(wire.others_size() == 0);
  const ReadyTensor decoded = RoundTrip(t);
  CHECK(decoded.ranks[2]->splits == std::vector<int64_t>{2, 2, 2});
  CHECK(decoded.ranks[1]->gpu.has_value());
  CHECK(!decoded.ranks[0]->gpu.has_value());
}

TEST_CASE("mixed dtypes travel whole for the odd rank and are still refused by validation") {
  const ReadyTensor t = Tensor(4, [](int r) {
    return Req(r, Collective::kAllreduce, {8}, r == 2 ? DataType::kFloat64 : DataType::kFloat32);
  });
  const CollectiveResponse::Tensor wire = Encode(t);
  REQUIRE(wire.others_size() == 1);
  CHECK(wire.others(0).rank() == 2);
  const absl::Status s = ValidateReadyTensor(RoundTrip(t), 4);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(s.message() ==
        "Mismatched data types: One rank had type float32, but another rank had type float64.");
}

TEST_CASE("scale factors that differ only in their sign bit are kept apart") {
  RoundTrip(Tensor(3, [](int r) {
    TensorRequest q = Req(r, Collective::kBroadcast, {2});
    q.meta.postscale = r == 1 ? -0.0 : 0.0;
    return q;
  }));
}

TEST_CASE("a malformed or old-format tensor is refused, not misread") {
  const ReadyTensor t = Tensor(4, [](int r) { return Req(r, Collective::kAllgather, {r + 1}); });
  SECTION("an old daemon's per-rank list (field 2) without the shared metadata") {
    TensorMeta meta = ToMeta(*t.ranks[0]);
    const std::string bytes = meta.SerializeAsString();
    std::string old =
        std::string("\x0a\x06grad/w\x12", 9) + static_cast<char>(bytes.size()) + bytes;
    CollectiveResponse::Tensor wire;
    REQUIRE(wire.ParseFromString(old));
    auto decoded = DecodeTensor(wire, 4);
    CHECK(decoded.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(decoded.status().message().find("another version") != std::string::npos);
  }
  CollectiveResponse::Tensor wire = Encode(t);
  SECTION("absent ranks out of order or out of range") {
    wire.add_absent_ranks(3);
    wire.add_absent_ranks(1);
    CHECK(!DecodeTensor(wire, 4).ok());
    wire.clear_absent_ranks();
    wire.add_absent_ranks(4);
    CHECK(!DecodeTensor(wire, 4).ok());
  }
  SECTION("a column of the wrong length") {
    wire.add_first_dims(9);
    CHECK(!DecodeTensor(wire, 4).ok());
  }
  SECTION("whole metadata for a rank that does not take part") {
    wire.add_absent_ranks(3);
    wire.mutable_first_dims()->RemoveLast();
    wire.mutable_bytes()->RemoveLast();
    REQUIRE(DecodeTensor(wire, 4).ok());
    *wire.add_others() = ToMeta(*t.ranks[3]);
    CHECK(!DecodeTensor(wire, 4).ok());
  }
  SECTION("a rank outside the job") { CHECK(!DecodeTensor(wire, 3).ok()); }
}

}  // namespace
}  // namespace ard::negotiation
