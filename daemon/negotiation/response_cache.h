// The response cache of cross-host negotiation (DESIGN.md "Negotiation", Horovod's response
// cache): once a tensor name has been negotiated with some metadata, the coordinator gives it a
// small id; the next time a host is ready for that name with the same metadata it sends the id
// instead of the metadata. Coordinator and hosts hold identical caches because only the
// coordinator decides (Put/evict) and every host applies its decisions in list order.
// LRU with a fixed capacity (default 1024, like Horovod). Pure; not thread-safe (owner's thread).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ard::negotiation {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity);

  // The id of `name` if it is cached with this `signature` (and marks it recently used).
  std::optional<uint32_t> Lookup(const std::string& name, uint64_t signature);
  // Coordinator: caches `name`; returns its id and appends evicted ids to `*evicted`.
  uint32_t Put(const std::string& name, uint64_t signature, std::vector<uint32_t>* evicted);
  // Host: applies the coordinator's decision (same id, same evictions).
  void Apply(uint32_t id, const std::string& name, uint64_t signature);
  void Evict(uint32_t id);
  // The name cached under `id`, if any.
  std::optional<std::string> Name(uint32_t id) const;

  size_t size() const { return by_id_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::string name;
    uint64_t signature;
    std::list<uint32_t>::iterator lru;  // position in lru_ (front = most recent)
  };

  void Touch(Entry& e, uint32_t id);

  const size_t capacity_;
  uint32_t next_id_ = 1;
  std::map<uint32_t, Entry> by_id_;
  std::map<std::string, uint32_t> by_name_;
  std::list<uint32_t> lru_;
};

}  // namespace ard::negotiation
