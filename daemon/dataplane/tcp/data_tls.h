// Optional encryption of the TCP data plane (--data_plane_tls; DESIGN.md "Security"): TLS 1.3 with
// the daemon's gRPC certificates (tls_cert_file, tls_key_file, tls_ca_file), run by OpenSSL on a
// data connection once the job-secret handshake (handshake.h) has passed. Both ends present a
// certificate that must chain to the CA and name the peer's advertised host (IP or DNS
// subjectAltName). OpenSSL is asked for kernel TLS (SSL_OP_ENABLE_KTLS): where the kernel offers
// it (the `tls` module), records are encrypted in the kernel and SSL_write/SSL_read are thin
// wrappers over send/recv; otherwise OpenSSL encrypts in user space (TlsStream::kernel_tls()
// says which, the mesh logs it).
//
// DataTlsContext: immutable after Create, any thread. TlsStream: one thread at a time (the mesh's
// op thread), except that the socket under it may be shut down from any thread (TcpMesh::Abort).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace ard::dataplane::tcp {

struct DataTlsFiles {
  std::string cert_file;  // PEM certificate of this daemon
  std::string key_file;   // its PEM private key
  std::string ca_file;    // PEM CA certificate(s) that peers' certificates must chain to
};

class DataTlsContext {
 public:
  // InvalidArgument naming the file that cannot be loaded (or a key that does not match the
  // certificate), with OpenSSL's reason.
  static absl::StatusOr<std::shared_ptr<DataTlsContext>> Create(const DataTlsFiles& files);
  ~DataTlsContext();
  DataTlsContext(const DataTlsContext&) = delete;
  DataTlsContext& operator=(const DataTlsContext&) = delete;

  SSL_CTX* get() const { return ctx_; }

 private:
  explicit DataTlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* const ctx_;
};

// TLS over one connected, non-blocking socket it does not own.
// Lifecycle: 1. Create (the dialer is the TLS client); 2. Handshake() until it returns 0;
// 3. Write/Read; 4. destroyed before the socket is closed (it sends no close_notify: transfers
// are framed, so a cut stream is found by their sizes and checksums).
class TlsStream {
 public:
  // `peer_host`: the host (IP or DNS name) the peer's certificate must name.
  static absl::StatusOr<std::unique_ptr<TlsStream>> Create(const DataTlsContext& context, int fd,
                                                           bool client,
                                                           const std::string& peer_host);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // One step of the handshake: 0 when done, else the poll() events (POLLIN/POLLOUT) to wait for
  // before the next step. Unauthenticated when the peer's certificate is refused, Unavailable
  // when the peer closes, DataLoss for any other TLS failure; each with OpenSSL's reason.
  absl::StatusOr<short> Handshake();

  // Like send()/recv() on a non-blocking socket: > 0 bytes moved; 0 on the peer's end of stream
  // (Read only); -1 with errno EAGAIN when the socket cannot move bytes now, EBADMSG when a record
  // fails its authentication or the TLS layer breaks (error() says why), else the socket's errno.
  ssize_t Write(const void* data, size_t bytes);
  ssize_t Read(void* data, size_t bytes);

  // Decrypted bytes already read from the socket and waiting for Read (poll() cannot see them).
  bool pending() const;
  // Whether the kernel encrypts (send) and decrypts (recv) this connection's records.
  bool kernel_tls() const;
  // OpenSSL's reason for the last EBADMSG.
  const std::string& error() const { return error_; }

 private:
  explicit TlsStream(SSL* ssl) : ssl_(ssl) {}
  ssize_t Result(int ret);  // maps an SSL_write/SSL_read return value

  SSL* const ssl_;
  std::string error_;
};

}  // namespace ard::dataplane::tcp
