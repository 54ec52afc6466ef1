// The timeline's one trace writer (docs/operator-guide.md "Timeline"): turns every host's recorded
// marks (proto/admin.proto StopTimelineResponse) into a Chrome trace (chrome://tracing, Perfetto
// JSON). One process row per host, one thread row per (rank, tensor) with that tensor's phases as
// slices, and one "fused groups" row per host; host clocks are aligned with each host's offset to
// the coordinator. Pure; unit-tested. Used by `allreducectl timeline`, which is also what
// HOROVOD_TIMELINE and hvd.start_timeline() run.
#pragma once

#include <string>
#include <vector>

#include "proto/admin.pb.h"

namespace ard::ctl {

// The phases of one tensor on one rank, in order (the slice names).
inline constexpr const char* kPhaseWait = "wait for ranks";    // submit -> this host ready
inline constexpr const char* kPhaseNegotiate = "negotiation";  // host ready -> committed
inline constexpr const char* kPhaseQueued = "queued";          // committed -> executor starts
inline constexpr const char* kPhaseReduce = "local reduce";    // executor -> transfer begins
inline constexpr const char* kPhaseTransfer = "cross-host transfer";
inline constexpr const char* kPhaseCopyOut = "result out";  // results written, ranks told

struct TraceStats {
  int slices = 0;     // phase slices written
  int instances = 0;  // (rank, tensor, submission) triples with a complete phase sequence
  int groups = 0;     // fused groups
};

// The trace JSON for `job` from the hosts' answers.
std::string WriteChromeTrace(const std::string& job, const std::vector<StopTimelineResponse>& hosts,
                             TraceStats* stats = nullptr);

}  // namespace ard::ctl
