// The few etcd operations that coordinator election needs (DESIGN.md "Coordinator failover"),
// independent of gRPC so that the elector is testable with a fake (STYLE.md "Seams");
// rpc/grpc_etcd_client implements it over etcd's v3 gRPC API.
//
// Calls are synchronous, each with a deadline, and made from one thread (the elector's). A call
// that no etcd endpoint answers returns UNAVAILABLE or DEADLINE_EXCEEDED naming the endpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ard::coordination {

// A key as etcd holds it.
struct EtcdKey {
  std::string value;
  int64_t create_revision = 0;  // grows with every creation of any key: the coordinator's term
  int64_t lease = 0;            // the lease it is attached to; 0: none
};

class EtcdClient {
 public:
  virtual ~EtcdClient() = default;
  // The key (a linearizable read), or nullopt when it does not exist.
  virtual absl::StatusOr<std::optional<EtcdKey>> Get(const std::string& key) = 0;
  // A new lease of `ttl` (whole seconds, rounded up); returns its id.
  virtual absl::StatusOr<int64_t> GrantLease(absl::Duration ttl) = 0;
  virtual absl::Status RevokeLease(int64_t lease) = 0;
  // Renews the lease; returns the time it has left. NOT_FOUND once it has expired.
  virtual absl::StatusOr<absl::Duration> KeepAlive(int64_t lease) = 0;
  // Creates `key` = `value` attached to `lease` if the key does not exist, in one transaction;
  // returns the key as it is afterwards (ours when it was created, else its holder's).
  virtual absl::StatusOr<EtcdKey> CreateIfAbsent(const std::string& key, const std::string& value,
                                                 int64_t lease) = 0;
};

}  // namespace ard::coordination
