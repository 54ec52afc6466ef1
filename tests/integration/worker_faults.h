// collective_worker's fault scenarios (tests/fault/): workloads that a test interrupts (kills a
// rank or a daemon, freezes a host, cuts a link) or that misbehave on purpose (a slow rank, a
// rank that submits a tensor the others never will). Parameters come from the environment.
#pragma once

#include <string>

#include "client/allreduced_client.h"

namespace ard::testing {

// Runs fault scenario `mode`; returns the process exit status, or -1 for an unknown mode.
int RunFaultMode(const std::string& mode, ard_client* client, const ard_topology& topo);

}  // namespace ard::testing
