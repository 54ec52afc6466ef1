// Helpers for the Job unit tests (job_test.cc, job_tensors_test.cc), which run without network.
// TestClient: one local process as a Job sees it, a real Session over one end of a SOCK_SEQPACKET
// socketpair with a sealed memfd as its input arena; the test holds the other end, reads the
// frames the daemon sends there and writes the frames a client would. JobHarness: a started
// EventLoop, the daemon's JobOptions and one Job with a FakeNegotiator (or a LocalNegotiator).
// Every call into the Job runs on the loop through OnLoop, which waits for it: tasks the Job
// posted earlier (on_finished) have run by then, so tests need no sleeps.
// Thread: the test's; the Job and its sessions' registration fields are touched on the loop only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/local_wire.h"
#include "daemon/common/event_loop.h"
#include "daemon/jobs/fake_negotiator.h"
#include "daemon/jobs/job.h"
#include "daemon/jobs/job_options.h"
#include "daemon/local/frame_codec.h"
#include "daemon/local/session.h"
#include "proto/common.pb.h"

namespace ard::jobs {

// A frame the daemon sent, as the client reads it.
struct ClientFrame {
  wire::MsgType type{};
  uint64_t request_id = 0;
  int32_t code = 0;           // ERROR, NOTIFY, COMPLETE
  std::string message;        // ERROR, NOTIFY, COMPLETE
  wire::Welcome welcome{};    // WELCOME
  wire::Complete complete{};  // COMPLETE
  wire::Segment segment{};    // RESULT_SEGMENT
  bool had_fd = false;
};

class TestClient {
 public:
  TestClient(pid_t pid, uint64_t arena_bytes);
  ~TestClient();
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  const std::shared_ptr<local::Session>& session() const { return session_; }
  pid_t pid() const { return pid_; }
  // The next frame from the daemon; fails the test when none comes within `timeout` (a guard
  // against a hang, not a synchronization).
  ClientFrame Next(absl::Duration timeout = absl::Seconds(10));
  // True when no frame waits to be read.
  bool Quiet();
  // Writes `bytes` at `offset` of input segment 0.
  void WriteInput(uint64_t offset, const void* data, size_t bytes);
  // Sends a SUBMIT frame over the socket and returns it as the daemon's side receives and
  // decodes it.
  local::DecodedFrame SendSubmit(uint64_t request_id, const wire::Submit& submit);
  // `bytes` at `offset` of result segment `segment`, mapped read-only from the descriptor that
  // WELCOME (segment 0) or RESULT_SEGMENT passed.
  std::string ReadResult(uint32_t segment, uint64_t offset, uint64_t bytes);
  // The process exits: its end of the socket closes.
  void Exit();

 private:
  const pid_t pid_;
  const uint64_t input_bytes_;
  int fd_ = -1;  // the client's end of the socketpair
  uint8_t* input_ = nullptr;
  std::shared_ptr<local::Session> session_;  // owns the daemon's end
  std::map<uint32_t, int> result_fds_;       // by result segment index; owned
};

// A SUBMIT of `name` with its input at `offset` of input segment 0.
wire::Submit MakeSubmit(const std::string& name, wire::Collective collective, wire::DataType dtype,
                        const std::vector<int64_t>& shape, uint64_t offset = 0);
wire::Submit FloatSum(const std::string& name, int64_t n, uint64_t offset = 0);
wire::Submit Barrier(const std::string& name);
wire::Submit Join();

// What LocalNegotiator would form: member i gets rank ranks[i] (= its local rank), one host.
Formation OneHostFormation(const std::vector<int>& ranks, const std::string& host);

JobOptions TestJobOptions();

class JobHarness {
 public:
  static constexpr char kJobName[] = "job-a";
  static constexpr uint32_t kJobId = 7;

  // A job of `size` ranks, all on this host, with a FakeNegotiator (`local_negotiator`: the real
  // LocalNegotiator instead; size 0: an elastic one bounded by `elastic_max_np`).
  explicit JobHarness(int size, bool local_negotiator = false,
                      JobOptions options = TestJobOptions(), int elastic_max_np = 0);
  ~JobHarness();

  // Runs `task` on the loop and waits for it (and so for every task posted before it).
  void OnLoop(const std::function<void()>& task);
  Job& job() { return *job_; }
  const JobOptions& options() const { return options_; }
  FakeNegotiator& negotiator();
  // How many times the job's on_finished ran (after running what the loop has queued).
  int finished();
  // The same count as it is now, for a task running on the loop.
  int finished_now() const { return finished_.load(); }
  JobState state();
  JobSummary Summary();

  // A new process (pid 1000 + n) registers (HELLO's rank and local rank, or -1) and is added.
  TestClient& Add(int rank = -1, int local_rank = -1, uint64_t arena_bytes = 4096);
  TestClient& client(int i) { return *clients_.at(i); }
  // The connection closed: the session is closed, then the job told (LocalSocketServer's order).
  void Close(TestClient& c, bool graceful, const std::string& why = "closed the connection");
  // A SUBMIT frame through the socketpair to the job.
  void Submit(TestClient& c, uint64_t request_id, const wire::Submit& submit);
  // Adds `size` processes, forms the job (rank = arrival order) and reads every WELCOME.
  void FormInOrder();

 private:
  const JobOptions options_;
  const int size_;
  EventLoop loop_{"job-test"};
  FakeNegotiator* fake_ = nullptr;  // Not owned (the job's); null with a LocalNegotiator
  std::atomic<int> finished_{0};
  std::unique_ptr<Job> job_;
  std::vector<std::unique_ptr<TestClient>> clients_;
};

// The next frame `c` reads is `type` with status `code` (Catch2 checks); returns its message.
std::string Expect(TestClient& c, wire::MsgType type, absl::StatusCode code,
                   uint64_t request_id = 0);

}  // namespace ard::jobs
