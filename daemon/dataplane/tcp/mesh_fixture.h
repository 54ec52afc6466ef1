// Test helper: n "hosts" in one process, each with its own DataListener on 127.0.0.1 (port 0),
// and meshes connected between them from one thread per host. Test-only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/dataplane/tcp/data_auth.h"
#include "daemon/dataplane/tcp/data_listener.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"

namespace ard::dataplane::tcp {

// Runs fn(host) for host = 0..n-1 on n threads at once; returns their statuses in host order.
inline std::vector<absl::Status> RunOnHosts(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int h = 0; h < n; ++h) threads.emplace_back([&, h] { statuses[h] = fn(h); });
  for (std::thread& t : threads) t.join();
  return statuses;
}

inline bool AllOk(const std::vector<absl::Status>& statuses) {
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return false;
  }
  return true;
}

class LocalHosts {
 public:
  explicit LocalHosts(int n, DataListenerOptions options = {})
      : LocalHosts(std::vector<DataListenerOptions>(n, options)) {}
  // One host per entry, each with its own listener options.
  explicit LocalHosts(std::vector<DataListenerOptions> per_host) {
    for (DataListenerOptions& options : per_host) {
      options.address = "127.0.0.1:0";
      listeners_.push_back(std::make_unique<DataListener>(options));
      start_status_.Update(listeners_.back()->Start());
      addresses_.push_back(absl::StrCat("127.0.0.1:", listeners_.back()->port()));
    }
  }

  int size() const { return static_cast<int>(listeners_.size()); }
  const absl::Status& start_status() const { return start_status_; }
  const std::vector<std::string>& addresses() const { return addresses_; }
  DataListener& listener(int h) { return *listeners_[h]; }

  // Connects one mesh per host for `job_id` (concurrently), generation 1 with a fresh secret; the
  // first error if any fails.
  absl::StatusOr<std::vector<std::unique_ptr<TcpMesh>>> ConnectAll(
      uint64_t job_id, TcpMeshOptions options = {}, absl::Duration timeout = absl::Seconds(10)) {
    absl::StatusOr<std::string> secret = NewJobSecret();
    if (!secret.ok()) return secret.status();
    const MeshJob job{job_id, 1, *secret};
    std::vector<std::unique_ptr<TcpMesh>> meshes(size());
    std::vector<absl::Status> statuses = RunOnHosts(size(), [&](int h) -> absl::Status {
      auto mesh = TcpMesh::Connect(job, h, addresses_, *listeners_[h], timeout, options);
      if (!mesh.ok()) return mesh.status();
      meshes[h] = std::move(*mesh);
      return absl::OkStatus();
    });
    for (const absl::Status& s : statuses) {
      if (!s.ok()) return s;
    }
    return meshes;
  }

 private:
  std::vector<std::unique_ptr<DataListener>> listeners_;
  std::vector<std::string> addresses_;
  absl::Status start_status_;
};

}  // namespace ard::dataplane::tcp
