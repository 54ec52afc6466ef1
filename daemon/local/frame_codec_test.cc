#include "daemon/local/frame_codec.h"

#include <cstring>

#include "catch2/catch.hpp"

namespace ard::local {
namespace {

using wire::MsgType;

std::string Raw(MsgType type, const void* payload, size_t n, uint64_t request_id = 1) {
  wire::FrameHeader h{wire::kMagic, wire::kVersion, static_cast<uint16_t>(type),
                      static_cast<uint32_t>(n), 0, request_id};
  std::string out(sizeof(h) + n, '\0');
  memcpy(out.data(), &h, sizeof(h));
  if (n) memcpy(out.data() + sizeof(h), payload, n);
  return out;
}

absl::StatusOr<DecodedFrame> Decode(const std::string& bytes, bool fd = false) {
  return DecodeFrame(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), fd);
}

std::string Error(const absl::StatusOr<DecodedFrame>& f) {
  REQUIRE(!f.ok());
  CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(f.status().message());
}

wire::Submit GoodSubmit() {
  wire::Submit s{};
  s.collective = static_cast<uint32_t>(wire::Collective::kAllreduce);
  s.dtype = static_cast<uint32_t>(wire::DataType::kFloat32);
  s.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
  s.prescale = s.postscale = 1.0;
  strcpy(s.name, "grad/w0");
  s.ndims = 2;
  s.shape[0] = 2;
  s.shape[1] = 3;
  s.bytes = 24;
  s.offset = 128;
  s.group_id = -1;
  return s;
}

wire::Hello GoodHello() {
  wire::Hello h{};
  strcpy(h.job, "job-1");
  h.rank = h.size = h.local_rank = h.local_size = -1;
  h.segment_bytes = 1 << 20;
  return h;
}

TEST_CASE("valid frames decode") {
  wire::Hello h = GoodHello();
  auto f = Decode(Raw(MsgType::kHello, &h, sizeof(h)), true);
  REQUIRE(f.ok());
  CHECK(std::string(f->hello.job) == "job-1");
  wire::Submit s = GoodSubmit();
  auto g = Decode(Raw(MsgType::kSubmit, &s, sizeof(s), 42));
  REQUIRE(g.ok());
  CHECK(g->request_id == 42);
  CHECK(Decode(Raw(MsgType::kRelease, nullptr, 0)).ok());
  CHECK(Decode(Raw(MsgType::kBye, nullptr, 0)).ok());
}

TEST_CASE("header errors") {
  wire::Hello h = GoodHello();
  std::string good = Raw(MsgType::kHello, &h, sizeof(h));
  CHECK(Error(Decode(good.substr(0, 10), true)).find("truncated header") != std::string::npos);
  std::string bad = good;
  bad[0] ^= 1;
  CHECK(Error(Decode(bad, true)).find("wrong magic") != std::string::npos);
  bad = good;
  bad[4] = 9;
  CHECK(Error(Decode(bad, true)).find("protocol version 9") != std::string::npos);
  CHECK(Error(Decode(good.substr(0, good.size() - 1), true)).find("payload_bytes") !=
        std::string::npos);
  CHECK(Error(Decode(Raw(static_cast<MsgType>(77), nullptr, 0))).find("unexpected message type") !=
        std::string::npos);
  CHECK(Error(Decode(Raw(MsgType::kWelcome, nullptr, 0))).find("unexpected message type") !=
        std::string::npos);
  CHECK(Error(Decode(good, false)).find("without a file descriptor") != std::string::npos);
  CHECK(Error(Decode(Raw(MsgType::kBye, nullptr, 0), true)).find("unexpected file descriptor") !=
        std::string::npos);
}

TEST_CASE("HELLO field errors") {
  auto check = [](auto mutate, const std::string& needle) {
    wire::Hello h = GoodHello();
    mutate(h);
    INFO(needle);
    CHECK(Error(Decode(Raw(MsgType::kHello, &h, sizeof(h)), true)).find(needle) !=
          std::string::npos);
  };
  check([](wire::Hello& h) { memset(h.job, 'a', sizeof(h.job)); }, "not NUL-terminated");
  check([](wire::Hello& h) { strcpy(h.job, "bad job"); }, "job name must be");
  check([](wire::Hello& h) { strcpy(h.job, ""); }, "job name must be");
  check([](wire::Hello& h) { h.size = 0; }, "size 0");
  check([](wire::Hello& h) { h.rank = 4, h.size = 4; }, "rank 4 is not below size 4");
  check([](wire::Hello& h) { h.local_rank = -7; }, "local_rank -7");
  check([](wire::Hello& h) { h.segment_bytes = 0; }, "0 bytes");
}

TEST_CASE("SUBMIT field errors") {
  auto check = [](auto mutate, const std::string& needle, std::vector<int64_t> splits = {}) {
    wire::Submit s = GoodSubmit();
    mutate(s);
    s.num_splits = splits.size();
    std::string payload(sizeof(s) + splits.size() * 8, '\0');
    memcpy(payload.data(), &s, sizeof(s));
    if (!splits.empty()) memcpy(payload.data() + sizeof(s), splits.data(), splits.size() * 8);
    INFO(needle);
    CHECK(Error(Decode(Raw(MsgType::kSubmit, payload.data(), payload.size()))).find(needle) !=
          std::string::npos);
  };
  check([](wire::Submit& s) { s.collective = 99; }, "unknown collective 99");
  check([](wire::Submit& s) { s.dtype = 0; }, "unknown dtype 0");
  check([](wire::Submit& s) { s.reduce_op = 17; }, "unknown reduce op 17");
  check([](wire::Submit& s) { s.name[0] = '\0'; }, "empty tensor name");
  check([](wire::Submit& s) { memset(s.name, 'n', sizeof(s.name)); }, "not NUL-terminated");
  check([](wire::Submit& s) { s.ndims = 9; }, "ndims 9");
  check([](wire::Submit& s) { s.shape[1] = -3; }, "shape [2, -3]");
  check([](wire::Submit& s) { s.bytes = 25; }, "bytes 25 != 24");
  check([](wire::Submit& s) { s.offset = 3; }, "not 64-byte aligned");
  check([](wire::Submit& s) { s.shape[0] = INT64_MAX; }, "shape");
  check(
      [](wire::Submit& s) {
        s.shape[0] = 1 << 20;
        s.shape[1] = 1 << 12;
        s.bytes = 1ull << 34;
      },
      "exceeds the limit");
  check([](wire::Submit& s) { s.prescale = 1.0 / 0.0; }, "finite");
  check([](wire::Submit& s) { s.group_id = 3, s.group_size = 0; }, "group");
  check(
      [](wire::Submit& s) { s.collective = static_cast<uint32_t>(wire::Collective::kBarrier); },
      "carry no tensor");
  check([](wire::Submit&) {}, "alltoall only", {1, 1});
  check(
      [](wire::Submit& s) { s.collective = static_cast<uint32_t>(wire::Collective::kAlltoall); },
      "splits sum to 3", {1, 2});
  check(
      [](wire::Submit& s) {
        s.collective = static_cast<uint32_t>(wire::Collective::kAlltoall);
      },
      "negative split", {3, -1});
  // Found by tests/fuzz: splits whose sum overflows int64 (undefined behaviour before).
  check(
      [](wire::Submit& s) {
        s.collective = static_cast<uint32_t>(wire::Collective::kAlltoall);
      },
      "splits sum overflows", {INT64_MAX - 1, INT64_MAX - 1});
  // A num_splits that disagrees with the frame length.
  wire::Submit s = GoodSubmit();
  s.num_splits = 2;
  CHECK(Error(Decode(Raw(MsgType::kSubmit, &s, sizeof(s)))).find("num_splits") != std::string::npos);
}

TEST_CASE("encoders produce frames with the right header and tail") {
  wire::Complete c{};
  c.bytes = 8;
  std::string f = EncodeComplete(9, c, {1, 2}, "oops");
  wire::FrameHeader h;
  memcpy(&h, f.data(), sizeof(h));
  CHECK(h.magic == wire::kMagic);
  CHECK(h.type == static_cast<uint16_t>(MsgType::kComplete));
  CHECK(h.request_id == 9);
  CHECK(h.payload_bytes == sizeof(wire::Complete) + 16 + 4);
  wire::Complete back;
  memcpy(&back, f.data() + sizeof(h), sizeof(back));
  CHECK(back.num_splits == 2);
  CHECK(back.message_bytes == 4);
  CHECK(f.substr(f.size() - 4) == "oops");
  std::string e = EncodeError(MsgType::kNotify, 0, 10, std::string(5000, 'x'));
  CHECK(e.size() == sizeof(h) + sizeof(wire::Error) + wire::kMaxMessageBytes);
}

TEST_CASE("GPU_REGISTER and GPU_SUBMIT decode with their tails; bad fields are named") {
  std::string payload(sizeof(wire::GpuRegister) + 2 * wire::kIpcHandleBytes, '\0');
  wire::GpuRegister g{};
  g.device = 1;
  g.num_events = 2;
  g.arena_bytes = 1 << 20;
  g.arena_handle[0] = 7;
  memcpy(payload.data(), &g, sizeof(g));
  payload[sizeof(g) + wire::kIpcHandleBytes] = 9;  // second event handle
  auto f = Decode(Raw(MsgType::kGpuRegister, payload.data(), payload.size()));
  REQUIRE(f.ok());
  CHECK(f->gpu_register.device == 1);
  REQUIRE(f->gpu_events.size() == 2);
  CHECK(f->gpu_events[1][0] == 9);
  // A tail that does not match num_events, and an empty pool.
  CHECK(Error(Decode(Raw(MsgType::kGpuRegister, payload.data(), payload.size() - 1)))
            .find("num_events") != std::string::npos);
  g.num_events = 0;
  memcpy(payload.data(), &g, sizeof(g));
  CHECK(Error(Decode(Raw(MsgType::kGpuRegister, payload.data(), payload.size())))
            .find("num_events 0") != std::string::npos);

  std::string submit(sizeof(wire::Submit) + sizeof(wire::GpuPlacement), '\0');
  wire::Submit s = GoodSubmit();
  wire::GpuPlacement p{128, 3, 0};
  memcpy(submit.data(), &s, sizeof(s));
  memcpy(submit.data() + sizeof(s), &p, sizeof(p));
  auto gs = Decode(Raw(MsgType::kGpuSubmit, submit.data(), submit.size()));
  REQUIRE(gs.ok());
  CHECK(gs->gpu_placement.offset == 128);
  CHECK(gs->gpu_placement.event == 3);
  p.offset = 100;  // not kSlotAlignment-aligned
  memcpy(submit.data() + sizeof(s), &p, sizeof(p));
  CHECK(Error(Decode(Raw(MsgType::kGpuSubmit, submit.data(), submit.size())))
            .find("placement") != std::string::npos);
}

}  // namespace
}  // namespace ard::local
