// allreducectl: the operator's CLI. `allreducectl [--daemon HOST:PORT] [--timeout_ms N]
// status [--json]`. Talks gRPC to any daemon's admin service (a follower forwards to the
// coordinator). Exit codes: 0 ok, 1 daemon unreachable or the call failed (one line on stderr),
// 2 usage error, 3 the daemon answered without a cluster view (a follower that cannot reach the
// coordinator: its local view is printed, and one line on stderr says why). `allreducectl bench
// ...` (and the hidden `bench-worker` it re-executes) run the client-library benchmark instead
// (bench_main.h); they speak to the daemons' local sockets. `allreducectl run ...` hands over to
// the Python launcher (run_main.h).
#pragma once

namespace ard::ctl {

int CtlMain(int argc, char** argv);

}  // namespace ard::ctl
