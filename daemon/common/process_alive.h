// Whether a process of this host still runs (Linux /proc).
// Pure apart from reading /proc; any thread.
#pragma once

#include <cstdint>

namespace ard {

// False for pid 0 (a peer whose pid this daemon's pid namespace cannot see), a pid with no
// /proc entry, and a zombie (it exited; its parent has not reaped it yet).
bool ProcessAlive(uint32_t pid);

}  // namespace ard
