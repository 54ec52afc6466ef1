// TEST DOUBLE of the Negotiator a Job composes (negotiator.h): records every call and leaves each
// decision to the test, which completes FormAsync with a Formation or an error of its choice,
// commits host-ready tensors when it likes (CommitNext) and drives the job's NegotiationSink
// (`sink`) directly: OnCommitted, OnJoinDone, OnFailedElsewhere.
// Thread: the control loop, like the real strategies; a test reads the record after running a
// task on the loop (JobHarness::OnLoop), which orders the reads after the job's calls.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/jobs/negotiator.h"

namespace ard::jobs {

class FakeNegotiator : public Negotiator {
 public:
  void FormAsync(const std::vector<MemberInfo>& members,
                 std::function<void(absl::StatusOr<Formation>)> done) override {
    forms.push_back(members);
    form_done.push_back(std::move(done));
  }
  void Start(NegotiationSink* s) override {
    ++starts;
    sink = s;
  }
  void HostReady(std::vector<negotiation::Response> responses) override {
    for (auto& r : responses) ready.push_back(std::move(r));
  }
  void SubmittedPartly(const std::string& name) override { partly.push_back(name); }
  void Join(const negotiation::TensorRequest& join) override { joins.push_back(join); }
  void PlanGpusAsync(const gpu::HostGpus&,
                     std::function<void(absl::StatusOr<gpu::CrossHostGpuPlan>)> done) override {
    done(absl::UnimplementedError("FakeNegotiator plans no GPUs"));
  }
  void ReportFailure(const absl::Status& failure) override { failures.push_back(failure); }
  void ReportLeft() override { ++left; }
  // Like CoordinatedNegotiator: the requests of host-ready tensors not committed yet.
  std::vector<negotiation::TensorRequest> TakeUncommitted() override {
    ++uncommitted_taken;
    std::vector<negotiation::TensorRequest> out;
    for (auto& response : ready) {
      for (auto& tensor : response.tensors) {
        for (auto& r : tensor.ranks) {
          if (r) out.push_back(std::move(*r));
        }
      }
    }
    ready.clear();
    return out;
  }

  // Completes the `i`-th FormAsync.
  void CompleteForm(size_t i, absl::StatusOr<Formation> formation) {
    form_done.at(i)(std::move(formation));
  }
  // Commits the oldest host-ready response (in order, as a real strategy does).
  void CommitNext() {
    negotiation::Response r = std::move(ready.front());
    ready.erase(ready.begin());
    sink->OnCommitted(std::move(r));
  }

  std::vector<std::vector<MemberInfo>> forms;  // each FormAsync's members
  std::vector<std::function<void(absl::StatusOr<Formation>)>> form_done;
  NegotiationSink* sink = nullptr;  // Not owned; from Start
  int starts = 0;
  std::vector<negotiation::Response> ready;  // host-ready, not committed or taken yet
  std::vector<std::string> partly;           // SubmittedPartly's names
  std::vector<negotiation::TensorRequest> joins;
  std::vector<absl::Status> failures;  // ReportFailure's arguments
  int left = 0;                        // ReportLeft calls
  int uncommitted_taken = 0;           // TakeUncommitted calls
};

}  // namespace ard::jobs
