// On a GPU host: the real gpu::Device (CUDA runtime + NCCL) in one process driving every local
// GPU as one communicator — every collective, every reducible dtype (float16 and bfloat16
// included), grouped calls, and abort. Skipped with a message without a GPU.
#include <cmath>
#include <cstring>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/collectives/half_float.h"
#include "tests/gpu/gpu_skip.h"

namespace ard::gpu::testing {
namespace {

using wire::DataType;
using wire::ReduceOp;

// Element `i` of rank `r` as a double, small integers so every dtype is exact.
double Value(int r, size_t i) { return static_cast<double>((r + 1) * ((i % 5) + 1)); }

void Encode(DataType dtype, double v, void* out) {
  switch (dtype) {
    case DataType::kUint8:
      *static_cast<uint8_t*>(out) = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      *static_cast<int8_t*>(out) = static_cast<int8_t>(v);
      break;
    case DataType::kInt32:
      *static_cast<int32_t*>(out) = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      *static_cast<int64_t*>(out) = static_cast<int64_t>(v);
      break;
    case DataType::kFloat16:
      *static_cast<uint16_t*>(out) = collectives::FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBfloat16:
      *static_cast<uint16_t*>(out) = collectives::FloatToBfloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      *static_cast<float*>(out) = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      *static_cast<double*>(out) = v;
      break;
    default:
      break;
  }
}

double Decode(DataType dtype, const void* in) {
  switch (dtype) {
    case DataType::kUint8:
      return *static_cast<const uint8_t*>(in);
    case DataType::kInt8:
      return *static_cast<const int8_t*>(in);
    case DataType::kInt32:
      return *static_cast<const int32_t*>(in);
    case DataType::kInt64:
      return static_cast<double>(*static_cast<const int64_t*>(in));
    case DataType::kFloat16:
      return collectives::HalfToFloat(*static_cast<const uint16_t*>(in));
    case DataType::kBfloat16:
      return collectives::Bfloat16ToFloat(*static_cast<const uint16_t*>(in));
    case DataType::kFloat32:
      return *static_cast<const float*>(in);
    case DataType::kFloat64:
      return *static_cast<const double*>(in);
    default:
      return NAN;
  }
}

struct Local {
  std::unique_ptr<Device> device;
  int n = 0;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Memory>> bufs;

  bool Init(const char* test, size_t bytes) {
    device = DeviceOrSkip(test);
    if (device == nullptr) return false;
    n = *device->DeviceCount();
    std::vector<CommRank> ranks;
    for (int d = 0; d < n; ++d) ranks.push_back({d, d});
    auto made =
        InitCommunicatorsAndWait(*device, *device->NewUniqueId(), n, ranks, absl::Seconds(60));
    REQUIRE(made.ok());
    comms = std::move(*made);
    for (int d = 0; d < n; ++d) {
      streams.push_back(*device->CreateStream(d));
      bufs.push_back(*device->Allocate(d, bytes));
    }
    return true;
  }
};

TEST_CASE("allreduce of every dtype and op across every local GPU") {
  Local l;
  constexpr size_t kCount = 1000;
  if (!l.Init("allreduce", kCount * 8 * 8)) return;
  const DataType dtypes[] = {DataType::kUint8,   DataType::kInt8,    DataType::kInt32,
                             DataType::kInt64,   DataType::kFloat16, DataType::kBfloat16,
                             DataType::kFloat32, DataType::kFloat64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAverage};
  for (DataType dtype : dtypes) {
    for (ReduceOp op : ops) {
      if (op == ReduceOp::kAverage && (dtype == DataType::kUint8 || dtype == DataType::kInt8)) {
        continue;
      }
      size_t es = wire::DataTypeSize(static_cast<uint32_t>(dtype));
      std::vector<std::vector<char>> host(l.n, std::vector<char>(kCount * es));
      for (int r = 0; r < l.n; ++r) {
        for (size_t i = 0; i < kCount; ++i) Encode(dtype, Value(r, i), &host[r][i * es]);
        REQUIRE(l.device->CopyAsync(l.bufs[r]->data(), host[r].data(), kCount * es, *l.streams[r])
                    .ok());
      }
      REQUIRE(l.device->GroupStart().ok());
      for (int r = 0; r < l.n; ++r) {
        void* b = l.bufs[r]->data();
        REQUIRE(l.comms[r]->Allreduce(b, b, kCount, dtype, op, l.n, *l.streams[r]).ok());
      }
      REQUIRE(l.device->GroupEnd().ok());
      REQUIRE(AwaitReady(l.comms, absl::Seconds(60)).ok());  // nonblocking: on the streams now
      for (int r = 0; r < l.n; ++r) {
        REQUIRE(l.device->CopyAsync(host[r].data(), l.bufs[r]->data(), kCount * es, *l.streams[r])
                    .ok());
        REQUIRE(l.device->Synchronize(*l.streams[r]).ok());
        for (size_t i = 0; i < kCount; i += 97) {
          double sum = 0, mn = 1e9, mx = -1e9;
          for (int s = 0; s < l.n; ++s) {
            sum += Value(s, i);
            mn = std::min(mn, Value(s, i));
            mx = std::max(mx, Value(s, i));
          }
          double want = op == ReduceOp::kSum   ? sum
                        : op == ReduceOp::kMin ? mn
                        : op == ReduceOp::kMax ? mx
                                               : sum / l.n;
          INFO("dtype " << static_cast<int>(dtype) << " op " << static_cast<int>(op));
          CHECK(Decode(dtype, &host[r][i * es]) == Approx(want).epsilon(0.01));
        }
      }
      REQUIRE(l.comms[0]->AsyncError().ok());
    }
  }
}

TEST_CASE("broadcast, allgather and reducescatter across every local GPU") {
  Local l;
  if (!l.Init("broadcast/allgather/reducescatter", 1 << 20)) return;
  const size_t count = 64;
  std::vector<std::vector<float>> in(l.n, std::vector<float>(count * l.n));
  std::vector<std::unique_ptr<Memory>> out;
  for (int r = 0; r < l.n; ++r) {
    for (size_t i = 0; i < in[r].size(); ++i) in[r][i] = static_cast<float>(r * 1000 + i);
    REQUIRE(
        l.device->CopyAsync(l.bufs[r]->data(), in[r].data(), in[r].size() * 4, *l.streams[r]).ok());
    out.push_back(*l.device->Allocate(r, count * l.n * 4));
  }
  auto run = [&](auto issue) {
    REQUIRE(l.device->GroupStart().ok());
    for (int r = 0; r < l.n; ++r) REQUIRE(issue(r).ok());
    REQUIRE(l.device->GroupEnd().ok());
    REQUIRE(AwaitReady(l.comms, absl::Seconds(60)).ok());
  };
  auto read = [&](int r, size_t n) {
    std::vector<float> v(n);
    REQUIRE(l.device->CopyAsync(v.data(), out[r]->data(), n * 4, *l.streams[r]).ok());
    REQUIRE(l.device->Synchronize(*l.streams[r]).ok());
    return v;
  };
  run([&](int r) {
    return l.comms[r]->Allgather(l.bufs[r]->data(), out[r]->data(), count, DataType::kFloat32,
                                 *l.streams[r]);
  });
  for (int r = 0; r < l.n; ++r) {
    auto v = read(r, count * l.n);
    for (int s = 0; s < l.n; ++s) CHECK(v[s * count + 3] == in[s][3]);
  }
  run([&](int r) {
    return l.comms[r]->ReduceScatter(l.bufs[r]->data(), out[r]->data(), count, DataType::kFloat32,
                                     ReduceOp::kSum, *l.streams[r]);
  });
  for (int r = 0; r < l.n; ++r) {
    float want = 0;
    for (int s = 0; s < l.n; ++s) want += in[s][r * count + 5];
    CHECK(read(r, count)[5] == want);
  }
  run([&](int r) {
    return l.comms[r]->Broadcast(l.bufs[r]->data(), out[r]->data(), count, DataType::kFloat32,
                                 l.n - 1, *l.streams[r]);
  });
  for (int r = 0; r < l.n; ++r) CHECK(read(r, count)[7] == in[l.n - 1][7]);
}

TEST_CASE("a local rank on a GPU that does not exist is refused and leaves no NCCL group open") {
  auto device = DeviceOrSkip("bad ordinal");
  if (device == nullptr) return;
  const int n = *device->DeviceCount();
  auto bad = InitCommunicatorsAndWait(*device, *device->NewUniqueId(), 2, {{0, 0}, {1, n}},
                                      absl::Seconds(20));
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  // An NCCL group left open by the refusal would defer this init forever (DeadlineExceeded).
  auto good =
      InitCommunicatorsAndWait(*device, *device->NewUniqueId(), 1, {{0, 0}}, absl::Seconds(20));
  REQUIRE(good.ok());
  auto stream = *device->CreateStream(0);
  auto buf = *device->Allocate(0, 4 * sizeof(float));
  const float in[4] = {1, 2, 3, 4};
  float out[4] = {};
  REQUIRE(device->CopyAsync(buf->data(), in, sizeof(in), *stream).ok());
  REQUIRE(
      (*good)[0]
          ->Allreduce(buf->data(), buf->data(), 4, DataType::kFloat32, ReduceOp::kSum, 1, *stream)
          .ok());
  REQUIRE(AwaitReady(*good, absl::Seconds(20)).ok());
  REQUIRE(device->CopyAsync(out, buf->data(), sizeof(out), *stream).ok());
  REQUIRE(device->Synchronize(*stream).ok());
  CHECK(out[3] == 4.0f);
}

TEST_CASE("abort makes a communicator report failure instead of hanging") {
  Local l;
  if (!l.Init("abort", 4096)) return;
  l.comms[0]->Abort();
  CHECK(l.comms[0]->AsyncError().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ard::gpu::testing
