// The coordinator's half of one cross-host job's response cache (DESIGN.md "Negotiation"): it
// decides which tensor names get ids (negotiation::ResponseCache) and remembers each host's
// metadata under each id, so a host may send the id instead of metadata it sent before. The
// decisions travel to every host in the job's event stream (JobEvent.cache_put/cache_evict);
// hosts replay them, so both sides hold the same cache.
// Thread: the control loop only (owned by its ClusterJob).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/negotiation/response_cache.h"
#include "daemon/negotiation/tensor_request.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster {

class JobResponseCache {
 public:
  explicit JobResponseCache(size_t capacity);

  // Remembers the full metadata `host` sent for a tensor: what its cache entry will hold.
  void RecordFull(const std::string& host, const HostReadyTensor& tensor);
  // Appends the metadata `host` cached under each of `ids` to `*tensors`. An id the host never
  // had (or one evicted long ago) is an Internal error naming the host and the id.
  absl::Status Expand(const std::string& host, const google::protobuf::RepeatedField<uint32_t>& ids,
                      std::vector<HostReadyTensor>* tensors) const;
  // Caches the names of `responses` that are not cached yet (with every host's last full
  // metadata); records the decisions, evictions first, in `*event`.
  void Update(const std::vector<negotiation::Response>& responses, JobEvent* event);

 private:
  using ByHost = std::map<std::string, HostReadyTensor>;

  const size_t capacity_;
  negotiation::ResponseCache cache_;
  std::map<std::string, ByHost> last_full_;  // tensor name -> host -> its last full metadata
  std::map<uint32_t, ByHost> cached_;        // id -> host -> metadata
  // Recently evicted entries, so an id a host sent before it saw the eviction still resolves.
  std::map<uint32_t, ByHost> evicted_;
  std::deque<uint32_t> evicted_order_;
};

}  // namespace ard::cluster
