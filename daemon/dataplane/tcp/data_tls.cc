#include "daemon/dataplane/tcp/data_tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"

namespace ard::dataplane::tcp {
namespace {

// Drains OpenSSL's thread-local error queue into one line.
std::string OpenSslErrors() {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof buffer);
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? "no OpenSSL reason" : text;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char address[16];
  return inet_pton(AF_INET, host.c_str(), address) == 1 ||
         inet_pton(AF_INET6, host.c_str(), address) == 1;
}

}  // namespace

absl::StatusOr<std::shared_ptr<DataTlsContext>> DataTlsContext::Create(const DataTlsFiles& files) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslErrors());
  std::shared_ptr<DataTlsContext> context(new DataTlsContext(ctx));
  auto bad = [](const std::string& what, const std::string& file) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane TLS: cannot load ", what, " ", file, ": ", OpenSslErrors()));
  };
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    return bad("certificate", files.cert_file);
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return bad("private key", files.key_file);
  }
  if (SSL_CTX_check_private_key(ctx) != 1) return bad("a key matching", files.cert_file);
  if (SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1) {
    return bad("CA", files.ca_file);
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // AES-GCM first: what kernel TLS and AES-NI speed up.
  SSL_CTX_set_ciphersuites(
      ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // No session tickets: no resumption is wanted, and a post-handshake ticket record would reach
  // a kernel-TLS receiver as a non-data record. An EOF without close_notify is a plain end of
  // stream (the mesh frames its transfers, so truncation is found there).
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_TICKET);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return context;
}

DataTlsContext::~DataTlsContext() { SSL_CTX_free(ctx_); }

absl::StatusOr<std::unique_ptr<TlsStream>> TlsStream::Create(const DataTlsContext& context, int fd,
                                                             bool client,
                                                             const std::string& peer_host) {
  ERR_clear_error();
  SSL* ssl = SSL_new(context.get());
  if (ssl == nullptr) return absl::InternalError("SSL_new: " + OpenSslErrors());
  std::unique_ptr<TlsStream> stream(new TlsStream(ssl));
  if (SSL_set_fd(ssl, fd) != 1) return absl::InternalError("SSL_set_fd: " + OpenSslErrors());
  // Both ends check that the other's certificate names the host it is known by in the job.
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  const int named = IsIpLiteral(peer_host)
                        ? X509_VERIFY_PARAM_set1_ip_asc(param, peer_host.c_str())
                        : X509_VERIFY_PARAM_set1_host(param, peer_host.c_str(), 0);
  if (named != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane TLS: bad peer host '", peer_host, "': ", OpenSslErrors()));
  }
  if (client) {
    SSL_set_connect_state(ssl);
  } else {
    SSL_set_accept_state(ssl);
  }
  return stream;
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

absl::StatusOr<short> TlsStream::Handshake() {
  ERR_clear_error();
  const int ret = SSL_do_handshake(ssl_);
  if (ret == 1) return 0;
  const int err = SSL_get_error(ssl_, ret);
  if (err == SSL_ERROR_WANT_READ) return POLLIN;
  if (err == SSL_ERROR_WANT_WRITE) return POLLOUT;
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    return absl::UnauthenticatedError(absl::StrCat(
        "TLS: the peer's certificate is refused: ", X509_verify_cert_error_string(verify), " (",
        OpenSslErrors(), ")"));
  }
  if (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN) {
    return absl::UnavailableError(absl::StrCat(
        "TLS handshake: the peer closed the connection (it refused this host's certificate, or "
        "does not run data_plane_tls): ",
        OpenSslErrors()));
  }
  return absl::DataLossError(absl::StrCat("TLS handshake failed: ", OpenSslErrors()));
}

ssize_t TlsStream::Write(const void* data, size_t bytes) {
  ERR_clear_error();
  errno = 0;
  return Result(SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(bytes, 1 << 30))));
}

ssize_t TlsStream::Read(void* data, size_t bytes) {
  ERR_clear_error();
  errno = 0;
  return Result(SSL_read(ssl_, data, static_cast<int>(std::min<size_t>(bytes, 1 << 30))));
}

ssize_t TlsStream::Result(int ret) {
  if (ret > 0) return ret;
  const int saved_errno = errno;
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    case SSL_ERROR_SYSCALL:
      // The socket's own error (e.g. ECONNRESET, or EPIPE after TcpMesh::Abort's shutdown), or
      // an end of stream when neither errno nor OpenSSL says more.
      if (saved_errno != 0) {
        ERR_clear_error();
        errno = saved_errno;
        return -1;
      }
      if (ERR_peek_error() == 0) return 0;
      [[fallthrough]];
    default:
      error_ = OpenSslErrors();
      errno = EBADMSG;
      return -1;
  }
}

bool TlsStream::pending() const { return SSL_pending(ssl_) > 0; }

bool TlsStream::kernel_tls() const {
  return BIO_get_ktls_send(SSL_get_wbio(ssl_)) && BIO_get_ktls_recv(SSL_get_rbio(ssl_));
}

}  // namespace ard::dataplane::tcp
