#include "tls/credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ard::tls {
namespace {

struct Pems {
  std::string cert, key, ca;
};

absl::StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a PEM file"));
  }
  return text.str();
}

absl::StatusOr<Pems> Load(const CredentialFiles& f) {
  if (f.cert_file.empty() || f.key_file.empty() || f.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS needs all of tls_cert_file, tls_key_file and tls_ca_file (or none)");
  }
  Pems p;
  for (auto [what, path, out] : {std::make_tuple("tls_cert_file", &f.cert_file, &p.cert),
                                 std::make_tuple("tls_key_file", &f.key_file, &p.key),
                                 std::make_tuple("tls_ca_file", &f.ca_file, &p.ca)}) {
    absl::StatusOr<std::string> pem = ReadPem(what, *path);
    if (!pem.ok()) return pem.status();
    *out = *std::move(pem);
  }
  return p;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const CredentialFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  absl::StatusOr<Pems> p = Load(files);
  if (!p.ok()) return p.status();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = p->ca;
  options.pem_key_cert_pairs.push_back({p->key, p->cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const CredentialFiles& files) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<Pems> p = Load(files);
  if (!p.ok()) return p.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = p->ca;
  options.pem_private_key = p->key;
  options.pem_cert_chain = p->cert;
  return grpc::SslCredentials(options);
}

}  // namespace ard::tls
