#include "ctl/run_main.h"

#include "catch2/catch.hpp"

namespace ard::ctl {
namespace {

TEST_CASE("run hands this allreducectl, --daemon and the TLS files to the launcher") {
  tls::CredentialFiles tls;
  tls.cert_file = "c.pem";
  tls.ca_file = "ca.pem";
  const auto argv = RunArgv("py", "/bin/ctl", "h:7070", tls, {"-np", "2", "--", "train"});
  REQUIRE(argv.size() == 15);
  CHECK(argv[0] == "py");
  CHECK(argv[1] == "-c");
  CHECK(argv[2].find("from allreduced.launch.cli import main") != std::string::npos);
  CHECK(std::vector<std::string>(argv.begin() + 3, argv.end()) ==
        std::vector<std::string>{"--allreducectl", "/bin/ctl", "--daemon", "h:7070", "--tls_cert",
                                 "c.pem", "--tls_ca", "ca.pem", "-np", "2", "--", "train"});
}

TEST_CASE("a Python that cannot be run is one line and exit 127") {
  setenv("ALLREDUCED_PYTHON", "/nonexistent/python", 1);
  CHECK(RunMain("h:7070", tls::CredentialFiles(), {"-np", "1", "true"}) == 127);
}

}  // namespace
}  // namespace ard::ctl
