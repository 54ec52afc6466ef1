// A formed job's sessions on this host, by rank: the local side of the data plane's
// CompletionSink (dataplane/completion_sink.h), so the executor reaches the ranks without knowing
// they are sessions. SendComplete is also what the job uses for requests that never reach an
// executor (rejected submits, a failed job's waiting tensors).
//
// Immutable after construction (the ranks of one formation); thread-safe as Session is.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "daemon/dataplane/completion_sink.h"
#include "daemon/local/session.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::local {

// Sends `session` its COMPLETE for `request` (see CompletionSink::Complete): frees the request's
// name and holds the result slot before the client can see it.
void SendComplete(Session& session, const negotiation::TensorRequest& request,
                  const absl::Status& status, const dataplane::RankResult* result,
                  int join_last_rank = -1);

class RankSessions : public dataplane::CompletionSink {
 public:
  // `ranks`: index = rank; null for other hosts' ranks.
  explicit RankSessions(std::vector<std::shared_ptr<Session>> ranks) : ranks_(std::move(ranks)) {}

  void AnnounceSegment(uint32_t index, const shm::MappedSegment& segment) override;
  void Complete(int rank, const negotiation::TensorRequest& request, const absl::Status& status,
                const dataplane::RankResult* result, int join_last_rank) override;

 private:
  const std::vector<std::shared_ptr<Session>> ranks_;
};

}  // namespace ard::local
