#include "daemon/negotiation/response_cache.h"

namespace ard::negotiation {

ResponseCache::ResponseCache(size_t capacity) : capacity_(capacity) {}

void ResponseCache::Touch(Entry& e, uint32_t id) {
  lru_.erase(e.lru);
  lru_.push_front(id);
  e.lru = lru_.begin();
}

std::optional<uint32_t> ResponseCache::Lookup(const std::string& name, uint64_t signature) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  Entry& e = by_id_.at(it->second);
  if (e.signature != signature) return std::nullopt;
  Touch(e, it->second);
  return it->second;
}

uint32_t ResponseCache::Put(const std::string& name, uint64_t signature,
                            std::vector<uint32_t>* evicted) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    // Same name, new metadata: replace it under a fresh id (hosts with the old one re-send).
    evicted->push_back(it->second);
    Evict(it->second);
  }
  while (capacity_ > 0 && by_id_.size() >= capacity_) {
    const uint32_t oldest = lru_.back();
    evicted->push_back(oldest);
    Evict(oldest);
  }
  const uint32_t id = next_id_++;
  if (capacity_ > 0) Apply(id, name, signature);
  return id;
}

void ResponseCache::Apply(uint32_t id, const std::string& name, uint64_t signature) {
  auto old = by_name_.find(name);
  if (old != by_name_.end()) Evict(old->second);
  lru_.push_front(id);
  by_id_[id] = Entry{name, signature, lru_.begin()};
  by_name_[name] = id;
  if (id >= next_id_) next_id_ = id + 1;
}

void ResponseCache::Evict(uint32_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  lru_.erase(it->second.lru);
  by_name_.erase(it->second.name);
  by_id_.erase(it);
}

std::optional<std::string> ResponseCache::Name(uint32_t id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second.name;
}

}  // namespace ard::negotiation
