#include "daemon/dataplane/tcp/secure_mesh.h"

#include <poll.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/status_macros.h"

namespace ard::dataplane::tcp {
namespace {

// The byte each end sends: whether it encrypts from here on.
constexpr uint8_t kPlaintext = 'P';
constexpr uint8_t kEncrypted = 'T';

const char* Setting(uint8_t mode) { return mode == kEncrypted ? "on" : "off"; }

absl::Status Named(const SecureMeshInput& in, int peer, const absl::Status& s) {
  return absl::Status(
      s.code(), absl::StrCat("job ", in.job_id, ": host ", in.self, " with host ", peer, " at ",
                             (*in.addresses)[peer], ": ", s.message()));
}

// Both ends send their byte before reading the other's: no order of hosts can deadlock.
absl::Status AgreeOnEncryption(const SecureMeshInput& in, absl::Time deadline) {
  const uint8_t mine = in.tls != nullptr ? kEncrypted : kPlaintext;
  for (int p : *in.peers) {
    const absl::Status sent = WriteAll((*in.fds)[p].get(), &mine, 1, deadline);
    if (!sent.ok()) return Named(in, p, sent);
  }
  for (int p : *in.peers) {
    uint8_t theirs = 0;
    const absl::Status got = ReadAll((*in.fds)[p].get(), &theirs, 1, deadline);
    if (!got.ok()) return Named(in, p, got);
    if (theirs == mine) continue;
    if (theirs != kPlaintext && theirs != kEncrypted) {
      return Named(in, p, absl::DataLossError("the peer sent no data-plane encryption setting"));
    }
    return Named(in, p,
                 absl::FailedPreconditionError(absl::StrCat(
                     "data_plane_tls is ", Setting(mine), " here and ", Setting(theirs),
                     " there (every daemon of a cluster must use the same setting)")));
  }
  return absl::OkStatus();
}

}  // namespace

std::string HostOf(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  std::string host = colon == std::string::npos ? host_port : host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

absl::StatusOr<std::vector<std::unique_ptr<TlsStream>>> SecureMesh(const SecureMeshInput& in,
                                                                   absl::Time deadline) {
  std::vector<std::unique_ptr<TlsStream>> streams(in.fds->size());
  ARD_RETURN_IF_ERROR(AgreeOnEncryption(in, deadline));
  if (in.tls == nullptr) return streams;
  for (int p : *in.peers) {  // the dialer (the smaller index) is the TLS client
    absl::StatusOr<std::unique_ptr<TlsStream>> stream =
        TlsStream::Create(*in.tls, (*in.fds)[p].get(), in.self < p, HostOf((*in.addresses)[p]));
    if (!stream.ok()) return Named(in, p, stream.status());
    streams[p] = *std::move(stream);
  }
  std::vector<int> busy = *in.peers;
  std::vector<pollfd> waits;
  while (!busy.empty()) {
    waits.clear();
    std::vector<int> still;
    for (int p : busy) {
      absl::StatusOr<short> events = streams[p]->Handshake();
      if (!events.ok()) return Named(in, p, events.status());
      if (*events == 0) continue;
      waits.push_back(pollfd{(*in.fds)[p].get(), *events, 0});
      still.push_back(p);
    }
    busy = std::move(still);
    if (busy.empty()) break;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("job ", in.job_id, ": host ", in.self, ": TLS handshakes with hosts [",
                       absl::StrJoin(busy, ","), "] not done until the timeout"));
    }
    if (::poll(waits.data(), waits.size(), absl::ToInt64Milliseconds(left) + 1) < 0 &&
        errno != EINTR) {
      return absl::InternalError(absl::StrCat("job ", in.job_id, ": poll: ", ErrnoText(errno)));
    }
  }
  return streams;
}

}  // namespace ard::dataplane::tcp
