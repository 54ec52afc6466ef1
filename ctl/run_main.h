// `allreducectl run ...`: horovodrun's command line, by handing over to the Python launcher
// (`python -m allreduced.launch`, python/allreduced/launch/) rather than a second
// implementation in C++: the process exec()s $ALLREDUCED_PYTHON (default python3) with the
// arguments after `run`, telling the launcher this allreducectl's path, --daemon and TLS files
// so that it reads the cluster view the same way. Called once from CtlMain on the main thread.
#pragma once

#include <string>
#include <vector>

#include "tls/credentials.h"

namespace ard::ctl {

// Returns only when the exec fails: 127, with one line on stderr. The launcher's own exit codes
// are the run's (allreduced.launch.cli).
int RunMain(const std::string& daemon, const tls::CredentialFiles& tls,
            const std::vector<std::string>& args);

// The argv that RunMain executes (python, its bootstrap, the launcher's options, `args`).
std::vector<std::string> RunArgv(const std::string& python, const std::string& self,
                                 const std::string& daemon, const tls::CredentialFiles& tls,
                                 const std::vector<std::string>& args);

}  // namespace ard::ctl
