// The test double itself must keep the CUDA/NCCL rules the orchestration relies on.
#include "daemon/gpu/testing/host_device.h"

#include <cstring>
#include <future>
#include <set>
#include <thread>

#include "catch2/catch.hpp"

namespace ard::gpu::testing {
namespace {

TEST_CASE("IPC memory maps the exporter's allocation; stale, wrong-device and own handles fail") {
  HostWorld world;
  HostDevice client(world, "h", 100, 2), daemon(world, "h", 1, 2);
  auto mem = client.Allocate(1, 4096);
  REQUIRE(mem.ok());
  auto handle = client.ExportMemory(**mem);
  REQUIRE(handle.ok());
  auto opened = daemon.OpenMemory(1, *handle);
  REQUIRE(opened.ok());
  CHECK((*opened)->data() != (*mem)->data());
  std::memcpy((*mem)->data(), "hello", 6);
  CHECK(std::strcmp(static_cast<char*>((*opened)->data()), "hello") == 0);
  CHECK((*opened)->size() == 4096);

  CHECK(daemon.OpenMemory(0, *handle).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(daemon.OpenMemory(2, *handle).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(client.OpenMemory(1, *handle).status().code() == absl::StatusCode::kInvalidArgument);
  IpcHandle junk{};
  CHECK(daemon.OpenMemory(1, junk).status().code() == absl::StatusCode::kInvalidArgument);

  mem->reset();  // exporter frees: the handle goes stale, the open mapping stays valid
  auto stale = daemon.OpenMemory(1, *handle);
  REQUIRE_FALSE(stale.ok());
  CHECK(std::string(stale.status().message()).find("stale") != std::string::npos);
  CHECK(std::strcmp(static_cast<char*>((*opened)->data()), "hello") == 0);
}

TEST_CASE("stream wait on an IPC event waits for the record issued before the wait") {
  HostWorld world;
  HostDevice client(world, "h", 100, 1), daemon(world, "h", 1, 1);
  auto ev = client.CreateEvent(0, true);
  REQUIRE(ev.ok());
  CHECK_FALSE(client.ExportEvent(**client.CreateEvent(0, false)).ok());
  auto opened = daemon.OpenEvent(0, *client.ExportEvent(**ev));
  REQUIRE(opened.ok());
  // CUDA refuses an IPC handle opened in the process that exported it.
  CHECK(client.OpenEvent(0, *client.ExportEvent(**ev)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  auto client_stream = *client.CreateStream(0);
  auto daemon_stream = *daemon.CreateStream(0);

  // The client's stream is held up by a gate; the daemon's stream must not run past its wait.
  std::promise<void> gate;
  std::shared_future<void> gate_future = gate.get_future().share();
  std::atomic<int> order{0};
  int client_step = -1, daemon_step = -1;
  REQUIRE(client.CopyAsync(&order, &order, 0, *client_stream).ok());
  static_cast<void>(client.Issue(
      *client_stream,
      [&] {
        gate_future.wait();
        client_step = order++;
        return absl::OkStatus();
      },
      false));
  REQUIRE(client.Record(**ev, *client_stream).ok());
  REQUIRE(daemon.Wait(*daemon_stream, **opened).ok());
  static_cast<void>(daemon.Issue(
      *daemon_stream,
      [&] {
        daemon_step = order++;
        return absl::OkStatus();
      },
      false));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(daemon_step == -1);  // still waiting on the event
  gate.set_value();
  REQUIRE(daemon.Synchronize(*daemon_stream).ok());
  CHECK(client_step == 0);
  CHECK(daemon_step == 1);
}

TEST_CASE("communicator ranks in two processes allreduce; several local ranks need a group") {
  HostWorld world;
  HostDevice a(world, "a", 10, 2), b(world, "b", 20, 1);
  UniqueId id = *a.NewUniqueId();
  auto b_future = std::async(std::launch::async, [&] {
    return InitCommunicatorsAndWait(b, id, 3, {{2, 0}}, absl::Seconds(5));
  });
  auto a_comms = InitCommunicatorsAndWait(a, id, 3, {{0, 0}, {1, 1}}, absl::Seconds(5));
  REQUIRE(a_comms.ok());
  auto b_comms = b_future.get();
  REQUIRE(b_comms.ok());

  auto s0 = *a.CreateStream(0), s1 = *a.CreateStream(1), s2 = *b.CreateStream(0);
  float x0[2] = {1, 2}, x1[2] = {10, 20}, x2[2] = {100, 200};
  // Outside a group, a process holding two ranks is refused (NCCL would deadlock).
  CHECK((*a_comms)[0]
            ->Allreduce(x0, x0, 2, wire::DataType::kFloat32, wire::ReduceOp::kSum, 3, *s0)
            .code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(a.GroupStart().ok());
  REQUIRE((*a_comms)[0]
              ->Allreduce(x0, x0, 2, wire::DataType::kFloat32, wire::ReduceOp::kAverage, 3, *s0)
              .ok());
  REQUIRE((*a_comms)[1]
              ->Allreduce(x1, x1, 2, wire::DataType::kFloat32, wire::ReduceOp::kAverage, 3, *s1)
              .ok());
  REQUIRE(a.GroupEnd().ok());
  REQUIRE((*b_comms)[0]
              ->Allreduce(x2, x2, 2, wire::DataType::kFloat32, wire::ReduceOp::kAverage, 3, *s2)
              .ok());
  REQUIRE(AwaitReady(*a_comms, absl::Seconds(5)).ok());  // in progress until polled
  REQUIRE(AwaitReady(*b_comms, absl::Seconds(5)).ok());
  REQUIRE(a.Synchronize(*s0).ok());
  REQUIRE(a.Synchronize(*s1).ok());
  REQUIRE(b.Synchronize(*s2).ok());
  CHECK(x0[0] == 37.0f);
  CHECK(x1[1] == 74.0f);
  CHECK(x2[0] == 37.0f);
  CHECK(a.group_ends() == 1);
}

TEST_CASE("duplicate GPU, init timeout, and abort failing a peer's pending collective") {
  HostWorld world;
  HostDevice a(world, "a", 10, 1), a2(world, "a", 11, 1), b(world, "b", 20, 1);
  UniqueId id = *a.NewUniqueId();
  auto dup = std::async(std::launch::async, [&] {
    return InitCommunicatorsAndWait(a, id, 2, {{0, 0}}, absl::Milliseconds(300));
  });
  auto second = InitCommunicatorsAndWait(a2, id, 2, {{1, 0}}, absl::Milliseconds(300));
  // Whichever joins second is refused (same host and GPU); the first waits out its deadline.
  std::set<absl::StatusCode> codes = {second.status().code(), dup.get().status().code()};
  CHECK(codes == std::set<absl::StatusCode>{absl::StatusCode::kInvalidArgument,
                                            absl::StatusCode::kDeadlineExceeded});

  UniqueId id2 = *a.NewUniqueId();
  auto bf = std::async(std::launch::async, [&] {
    return InitCommunicatorsAndWait(b, id2, 2, {{1, 0}}, absl::Seconds(5));
  });
  auto ac = InitCommunicatorsAndWait(a, id2, 2, {{0, 0}}, absl::Seconds(5));
  REQUIRE(ac.ok());
  auto bc = bf.get();
  REQUIRE(bc.ok());
  auto sa = *a.CreateStream(0);
  int32_t v = 5;
  // Rank 1 never joins this collective; rank 1 aborts, rank 0's pending one fails.
  REQUIRE(
      (*ac)[0]->Allreduce(&v, &v, 1, wire::DataType::kInt32, wire::ReduceOp::kSum, 2, *sa).ok());
  REQUIRE(AwaitReady(*ac, absl::Seconds(5)).ok());  // on the stream, waiting for rank 1
  (*bc)[0]->Abort();
  absl::Status done = a.Synchronize(*sa);
  CHECK(done.code() == absl::StatusCode::kUnavailable);
  CHECK((*ac)[0]->AsyncError().code() == absl::StatusCode::kUnavailable);
  CHECK((*bc)[0]->AsyncError().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(v == 5);
}

TEST_CASE("abort frees the communicator at once, as ncclCommAbort reclaims it") {
  HostWorld world;
  HostDevice a(world, "a", 10, 1), b(world, "b", 20, 1);
  UniqueId id = *a.NewUniqueId();
  auto bf = std::async(std::launch::async, [&] {
    return InitCommunicatorsAndWait(b, id, 2, {{1, 0}}, absl::Seconds(5));
  });
  auto ac = InitCommunicatorsAndWait(a, id, 2, {{0, 0}}, absl::Seconds(5));
  REQUIRE(ac.ok());
  auto bc = bf.get();
  REQUIRE(bc.ok());
  CHECK(world.live_communicators() == 2);
  (*ac)[0]->Abort();
  CHECK(world.live_communicators() == 1);  // freed while the object lives on
  (*ac)[0]->Abort();                       // idempotent: the handle is not touched again
  CHECK(world.live_communicators() == 1);
  auto sa = *a.CreateStream(0);
  int32_t v = 1;
  CHECK(
      (*ac)[0]->Allreduce(&v, &v, 1, wire::DataType::kInt32, wire::ReduceOp::kSum, 2, *sa).code() ==
      absl::StatusCode::kFailedPrecondition);
  CHECK((*bc)[0]->AsyncError().code() == absl::StatusCode::kUnavailable);
  bc->clear();
  CHECK(world.live_communicators() == 0);
}

TEST_CASE(
    "an accepted collective is in progress: it reaches its stream only once State() is polled") {
  HostWorld world;
  HostDevice a(world, "a", 10, 1);
  auto comms = InitCommunicatorsAndWait(a, *a.NewUniqueId(), 1, {{0, 0}}, absl::Seconds(5));
  REQUIRE(comms.ok());
  Communicator& comm = *(*comms)[0];
  auto stream = *a.CreateStream(0);
  auto buf = *a.Allocate(0, 64);
  const float two[2] = {2, 2};
  float out[2] = {0, 0};
  REQUIRE(a.CopyAsync(buf->data(), two, sizeof(two), *stream).ok());
  REQUIRE(comm.Allreduce(buf->data(), buf->data(), 2, wire::DataType::kFloat32,
                         wire::ReduceOp::kAverage, 2, *stream)
              .ok());
  CHECK(*comm.State() == CommState::kInProgress);
  // Queued before the collective reached the stream: it runs first (reads 2, not the average).
  REQUIRE(a.CopyAsync(out, buf->data(), sizeof(out), *stream).ok());
  REQUIRE(a.Synchronize(*stream).ok());
  CHECK(out[0] == 2.0f);
  REQUIRE(AwaitReady(*comms, absl::Seconds(5)).ok());
  REQUIRE(a.CopyAsync(out, buf->data(), sizeof(out), *stream).ok());
  REQUIRE(a.Synchronize(*stream).ok());
  CHECK(out[0] == 1.0f);
  // NCCL's PreMulSum takes floating-point factors only.
  int32_t i = 4;
  CHECK(comm.Allreduce(&i, &i, 1, wire::DataType::kInt32, wire::ReduceOp::kAverage, 2, *stream)
            .code() == absl::StatusCode::kUnimplemented);
  // An injected refusal (ncclInvalidUsage) answers the next call.
  a.FailNextCall(absl::InvalidArgumentError("ncclInvalidUsage"));
  CHECK(comm.Allreduce(buf->data(), buf->data(), 2, wire::DataType::kFloat32, wire::ReduceOp::kSum,
                       1, *stream)
            .code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("finalize completes once the rank's collectives ran; destroying it then is no abort") {
  HostWorld world;
  HostDevice a(world, "a", 10, 1);
  auto comms = InitCommunicatorsAndWait(a, *a.NewUniqueId(), 1, {{0, 0}}, absl::Seconds(5));
  REQUIRE(comms.ok());
  auto stream = *a.CreateStream(0);
  float x = 3;
  REQUIRE((*comms)[0]
              ->Allreduce(&x, &x, 1, wire::DataType::kFloat32, wire::ReduceOp::kSum, 1, *stream)
              .ok());
  REQUIRE((*comms)[0]->Finalize().ok());
  REQUIRE(AwaitReady(*comms, absl::Seconds(5)).ok());
  comms->clear();
  CHECK(world.finalized_communicators() == 1);
  CHECK(world.aborted_communicators() == 0);
  CHECK(world.thread_violations() == 0);

  // Not finalized: destruction aborts (and a call from another thread is counted).
  auto again = InitCommunicatorsAndWait(a, *a.NewUniqueId(), 1, {{0, 0}}, absl::Seconds(5));
  REQUIRE(again.ok());
  std::thread([&] { static_cast<void>((*again)[0]->State()); }).join();
  CHECK(world.thread_violations() == 1);
  again->clear();
  CHECK(world.aborted_communicators() == 1);
}

TEST_CASE("a copy through a mapping whose exporter freed it poisons the context (sticky)") {
  HostWorld world;
  HostDevice client(world, "h", 100, 1), daemon(world, "h", 1, 1);
  auto mem = *client.Allocate(0, 4096);
  auto opened = *daemon.OpenMemory(0, *client.ExportMemory(*mem));
  auto stream = *daemon.CreateStream(0);
  char byte = 7;
  REQUIRE(daemon.CopyAsync(opened->data(), &byte, 1, *stream).ok());
  REQUIRE(daemon.Synchronize(*stream).ok());
  mem.reset();  // the exporter frees (or exits) while the daemon still maps it
  REQUIRE(daemon.CopyAsync(opened->data(), &byte, 1, *stream).ok());
  absl::Status status = daemon.Synchronize(*stream);
  CHECK(IsStickyError(status));
  CHECK(IsStickyError(daemon.Query(*stream).status()));
  auto other = *daemon.CreateStream(0);  // every later call on that GPU fails
  CHECK(IsStickyError(daemon.CopyAsync(&byte, &byte, 1, *other)));
  CHECK(IsStickyError(daemon.Allocate(0, 64).status()));
}

}  // namespace
}  // namespace ard::gpu::testing
