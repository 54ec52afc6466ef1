// The negotiation strategy a new job composes (DESIGN.md "Negotiation"): LocalNegotiator when
// every rank is on this host, CoordinatedNegotiator when its ranks span hosts or it is an
// elastic job of a daemon with cross-host jobs (the coordinator forms it), decorated by
// SteadyNegotiator when the steady state is on. One choice for fixed and elastic jobs.
// Thread: the control loop.
#pragma once

#include <memory>
#include <string>

#include "daemon/cluster/negotiation_client.h"
#include "daemon/common/event_loop.h"
#include "daemon/jobs/job_options.h"
#include "daemon/jobs/negotiator.h"

namespace ard::jobs {

// What the strategies need from the daemon (all outlive the job).
struct NegotiatorDeps {
  EventLoop& loop;
  const JobOptions& options;
  cluster::NegotiationClient* coordinator;  // Not owned; null: single-host jobs only
  const std::string& data_address;          // this daemon's data-plane listener
};

// `size` and `local_size`: a fixed job's (0 for an elastic one); `spec`: an elastic job's bounds
// (min_np 0: fixed).
std::unique_ptr<Negotiator> ChooseNegotiator(const NegotiatorDeps& deps, const std::string& name,
                                             int size, int local_size, ElasticSpec spec);

}  // namespace ard::jobs
