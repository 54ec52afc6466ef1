// What the data plane tells a job's ranks on this host (STYLE.md "Seams"; like
// cluster/job_channel.h, the interface is owned by the side that calls it): a new result segment
// to map, and each rank's COMPLETE. The local sessions implement it (local/rank_sessions.h) and
// the job injects it through JobContext, so dataplane/ never includes local/.
//
// Thread: the job's executor thread, and the control loop for responses run inline
// (Executor::TryRunInline); implementations are thread-safe.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "daemon/dataplane/collective.h"
#include "daemon/negotiation/tensor_request.h"
#include "daemon/shm/mapped_segment.h"

namespace ard::dataplane {

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;

  // Result segment `index` of the job's arena was created: every rank on this host maps it
  // before any COMPLETE that names it (so this is called before those COMPLETEs).
  virtual void AnnounceSegment(uint32_t index, const shm::MappedSegment& segment) = 0;

  // `rank`'s COMPLETE for `request`: `status`, and on success `result` (null: no data, e.g. a
  // rank that only sent). `join_last_rank`: the last rank to join, for a join's response; -1
  // otherwise. A rank not on this host is skipped.
  virtual void Complete(int rank, const negotiation::TensorRequest& request,
                        const absl::Status& status, const RankResult* result,
                        int join_last_rank) = 0;
};

}  // namespace ard::dataplane
