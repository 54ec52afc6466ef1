// `allreducectl timeline --job J -o FILE [--duration S]` (docs/operator-guide.md "Timeline"): arms
// every UP host's recorder for the job (Admin.StartTimeline), waits for the duration or until
// SIGINT/SIGTERM, collects every host's marks and clock offset (Admin.StopTimeline) and writes the
// Chrome trace (timeline_trace.h). The trainers are not involved. Also what HOROVOD_TIMELINE runs.
#pragma once

#include <string>
#include <vector>

#include "tls/credentials.h"

namespace ard::ctl {

// `args`: the arguments after "timeline". Returns the exit status (0 written, 1 a daemon could
// not be reached or the file not written, 2 usage).
int TimelineMain(const std::string& daemon, const tls::CredentialFiles& tls, int timeout_ms,
                 const std::vector<std::string>& args);

}  // namespace ard::ctl
