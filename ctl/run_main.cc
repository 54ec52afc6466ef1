#include "ctl/run_main.h"

#include <errno.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ard::ctl {
namespace {

// Imports the launcher with a one-line error (not a traceback) when this Python lacks it.
constexpr char kBootstrap[] =
    "import sys\n"
    "try:\n"
    "    from allreduced.launch.cli import main\n"
    "except ImportError as e:\n"
    "    sys.exit('allreducectl run: %s: %s (the launcher is the allreduced Python package; set "
    "ALLREDUCED_PYTHON to a Python that has it, or PYTHONPATH to its directory)' % "
    "(sys.executable, e))\n"
    "sys.exit(main(sys.argv[1:], prog='allreducectl run'))\n";

std::string SelfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, n) : "allreducectl";
}

}  // namespace

std::vector<std::string> RunArgv(const std::string& python, const std::string& self,
                                 const std::string& daemon, const tls::CredentialFiles& tls,
                                 const std::vector<std::string>& args) {
  std::vector<std::string> argv = {python, "-c",       kBootstrap, "--allreducectl",
                                   self,   "--daemon", daemon};
  const std::pair<const char*, const std::string*> files[] = {
      {"--tls_cert", &tls.cert_file}, {"--tls_key", &tls.key_file}, {"--tls_ca", &tls.ca_file}};
  for (const auto& [flag, file] : files) {
    if (!file->empty()) argv.insert(argv.end(), {flag, *file});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

int RunMain(const std::string& daemon, const tls::CredentialFiles& tls,
            const std::vector<std::string>& args) {
  const char* env = std::getenv("ALLREDUCED_PYTHON");
  const std::string python = env != nullptr && *env != '\0' ? env : "python3";
  const std::vector<std::string> argv = RunArgv(python, SelfPath(), daemon, tls, args);
  std::vector<char*> c_argv;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  std::fflush(nullptr);
  execvp(c_argv[0], c_argv.data());
  std::fprintf(stderr,
               "allreducectl run: cannot run %s: %s (the launcher is the allreduced Python "
               "package; set ALLREDUCED_PYTHON to a Python that has it)\n",
               python.c_str(), std::strerror(errno));
  return 127;
}

}  // namespace ard::ctl
