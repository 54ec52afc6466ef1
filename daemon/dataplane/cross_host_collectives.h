// The data of every collective for a job whose ranks live on several hosts (DESIGN.md "Data
// plane"): each host first reduces (or gathers) its own ranks' inputs from shared memory, then
// only hosts exchange data over the job's TCP mesh (daemon/dataplane/tcp), and each host writes
// its ranks' results into the job's result arena. Allreduces of one kind in a response travel in
// one fusion buffer. Reductions are deterministic: ranks in rank order within a host, then hosts
// in host order, so every rank reads bit-identical results. Runs on the job's executor thread.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "daemon/dataplane/job_context.h"
#include "daemon/dataplane/local_collectives.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::dataplane {

// `(*out)[i][rank]` receives tensor i's result for each local rank that takes part.
absl::Status RunCrossHostCollective(const negotiation::Response& response, JobContext& job,
                                    const SlotAllocator& allocate,
                                    std::vector<std::vector<RankResult>>* out,
                                    uint64_t* bytes_reduced);

}  // namespace ard::dataplane
