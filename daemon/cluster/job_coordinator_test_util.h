// Shared by the coordinator's unit tests: an event sink that records, and request builders.
#pragma once

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/cluster/cluster_job.h"
#include "daemon/negotiation/response_codec.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster::testing {

class FakeSink : public JobEventSink {
 public:
  void Send(const JobEvent& event) override {
    absl::MutexLock lock(&mu_);
    events_.push_back(event);
  }
  void Finish(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    finished_ = true;
  }
  std::vector<JobEvent> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  bool finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }

 private:
  absl::Mutex mu_;
  std::vector<JobEvent> events_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// How many ranks take part in committed tensor `t` of a job of `job_size` ranks (-1: it does
// not decode).
inline int TakingPart(const CollectiveResponse::Tensor& t, int job_size) {
  auto tensor = negotiation::DecodeTensor(t, job_size);
  if (!tensor.ok()) return -1;
  int n = 0;
  for (const auto& r : tensor->ranks) n += r ? 1 : 0;
  return n;
}

// `local_ranks` ranks of job "train" on `host`, local ranks 0.., no launcher ranks.
inline RegisterRanksRequest Registration(const std::string& host, int local_ranks, int size) {
  RegisterRanksRequest r;
  r.set_job("train");
  r.set_host(host);
  r.set_size(size);
  r.set_data_address(host + ":9000");
  r.set_timeout_ms(60000);
  for (int i = 0; i < local_ranks; ++i) {
    auto* lr = r.add_ranks();
    lr->set_local_rank(i);
    lr->set_rank(-1);
    lr->set_pid(100 + i);
  }
  return r;
}

// A float32 sum allreduce of `shape` from `rank`.
inline TensorMeta Meta(int rank, std::vector<int64_t> shape, uint32_t dtype = 9) {
  TensorMeta m;
  m.set_rank(rank);
  m.set_collective(1);
  m.set_dtype(dtype);
  m.set_reduce_op(1);
  m.set_prescale(1.0);
  m.set_postscale(1.0);
  int64_t n = 1;
  for (int64_t d : shape) {
    m.add_shape(d);
    n *= d;
  }
  m.set_bytes(n * 4);
  m.set_group_id(-1);
  return m;
}

// `host`'s Negotiate call of job `job_id` with tensor `name` ready on `ranks` (shape {4}).
inline NegotiateRequest Ready(uint64_t job_id, const std::string& host, const std::string& name,
                              std::vector<int> ranks) {
  NegotiateRequest request;
  request.set_job_id(job_id);
  request.set_generation(1);
  request.set_host(host);
  auto* t = request.add_ready();
  t->set_name(name);
  for (int r : ranks) *t->add_ranks() = Meta(r, {4});
  return request;
}

}  // namespace ard::cluster::testing
