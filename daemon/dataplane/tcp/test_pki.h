// Test and benchmark helper: certificates for --data_plane_tls made with the openssl command, once
// per process, under $TEST_TMPDIR (else a fresh /tmp directory): a CA ("ca") signing "good"
// (names 127.0.0.1) and "elsewhere" (names elsewhere.example), and a rogue CA ("rogue") signing
// "intruder" (names 127.0.0.1). Test-only; any thread after the first call.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/dataplane/tcp/data_tls.h"

namespace ard::dataplane::tcp {

// The directory of the PKI; empty when the openssl command failed.
inline const std::string& TestPki() {
  static const std::string dir = []() -> std::string {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string d = tmp != nullptr ? absl::StrCat(tmp, "/pki") : "/tmp/ard-pki.XXXXXX";
    if (tmp == nullptr && ::mkdtemp(d.data()) == nullptr) return "";
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script = absl::StrCat("set -e; mkdir -p ", d, "; cd ", d, "; exec 2>log; ");
    for (const char* ca : {"ca", "rogue"}) {
      absl::StrAppend(&script, "openssl req -x509 ", key, " -keyout ", ca, ".key -out ", ca,
                      ".pem -days 2 -subj /CN=", ca, " >/dev/null; ");
    }
    const char* certs[][3] = {{"good", "ca", "IP:127.0.0.1"},
                              {"elsewhere", "ca", "DNS:elsewhere.example"},
                              {"intruder", "rogue", "IP:127.0.0.1"}};
    for (const auto& [name, ca, san] : certs) {
      absl::StrAppend(&script, "printf 'subjectAltName=", san,
                      "\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ", name, ".ext; ",
                      "openssl req ", key, " -keyout ", name, ".key -out ", name,
                      ".csr -subj /CN=", name, " >/dev/null; openssl x509 -req -in ", name,
                      ".csr -CA ", ca, ".pem -CAkey ", ca, ".key -CAcreateserial -out ", name,
                      ".pem -days 2 ", "-extfile ", name, ".ext >/dev/null; ");
    }
    return std::system(script.c_str()) == 0 ? d : "";
  }();
  return dir;
}

// The TLS context of a host presenting certificate `name` of TestPki(), trusting CA `ca`.
inline absl::StatusOr<std::shared_ptr<DataTlsContext>> TestTlsContext(
    const std::string& name, const std::string& ca = "ca") {
  const std::string& d = TestPki();
  if (d.empty()) return absl::InternalError("the openssl command could not make the test PKI");
  return DataTlsContext::Create({absl::StrCat(d, "/", name, ".pem"),
                                 absl::StrCat(d, "/", name, ".key"),
                                 absl::StrCat(d, "/", ca, ".pem")});
}

}  // namespace ard::dataplane::tcp
