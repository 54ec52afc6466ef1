#include "daemon/cluster/job_response_cache.h"

#include "absl/strings/str_cat.h"
#include "daemon/negotiation/meta_convert.h"

namespace ard::cluster {

JobResponseCache::JobResponseCache(size_t capacity) : capacity_(capacity), cache_(capacity) {}

void JobResponseCache::RecordFull(const std::string& host, const HostReadyTensor& tensor) {
  last_full_[tensor.name()][host] = tensor;
}

absl::Status JobResponseCache::Expand(const std::string& host,
                                      const google::protobuf::RepeatedField<uint32_t>& ids,
                                      std::vector<HostReadyTensor>* tensors) const {
  for (uint32_t id : ids) {
    const HostReadyTensor* found = nullptr;
    for (const auto* table : {&cached_, &evicted_}) {
      auto entry = table->find(id);
      if (found == nullptr && entry != table->end() && entry->second.count(host)) {
        found = &entry->second.at(host);
      }
    }
    if (found == nullptr) {
      return absl::InternalError(
          absl::StrCat("host ", host, " named unknown response-cache id ", id));
    }
    tensors->push_back(*found);
  }
  return absl::OkStatus();
}

void JobResponseCache::Update(const std::vector<negotiation::Response>& responses,
                              JobEvent* event) {
  for (const negotiation::Response& r : responses) {
    if (!r.error.ok() || r.collective == wire::Collective::kJoin) continue;
    for (const auto& t : r.tensors) {
      const ByHost& by_host = last_full_[t.name];
      uint64_t signature = 0;
      for (const auto& [host, payload] : by_host) {
        signature = signature * 1000003 ^ negotiation::Signature(payload);
      }
      if (cache_.Lookup(t.name, signature)) continue;
      std::vector<uint32_t> evicted;
      const uint32_t id = cache_.Put(t.name, signature, &evicted);
      for (uint32_t gone : evicted) {
        event->add_cache_evict(gone);
        evicted_[gone] = std::move(cached_[gone]);
        cached_.erase(gone);
        evicted_order_.push_back(gone);
        if (evicted_order_.size() > capacity_) {
          evicted_.erase(evicted_order_.front());
          evicted_order_.pop_front();
        }
      }
      if (capacity_ == 0) continue;
      cached_[id] = by_host;
      CacheEntry* put = event->add_cache_put();
      put->set_id(id);
      put->set_name(t.name);
    }
  }
}

}  // namespace ard::cluster
