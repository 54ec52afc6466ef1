#include "daemon/negotiation/response_cache.h"

#include "catch2/catch.hpp"

namespace ard::negotiation {
namespace {

TEST_CASE("misses, then hits with the same metadata, misses with other metadata") {
  ResponseCache c(4);
  CHECK(!c.Lookup("a", 1));
  std::vector<uint32_t> evicted;
  const uint32_t id = c.Put("a", 1, &evicted);
  CHECK(evicted.empty());
  REQUIRE(c.Lookup("a", 1));
  CHECK(*c.Lookup("a", 1) == id);
  CHECK(!c.Lookup("a", 2));  // shape changed: must renegotiate in full
  CHECK(*c.Name(id) == "a");
}

TEST_CASE("least recently used entries are evicted at capacity") {
  ResponseCache c(2);
  std::vector<uint32_t> evicted;
  const uint32_t a = c.Put("a", 1, &evicted);
  const uint32_t b = c.Put("b", 1, &evicted);
  REQUIRE(c.Lookup("a", 1));  // a is now more recent than b
  const uint32_t x = c.Put("c", 1, &evicted);
  CHECK(evicted == std::vector<uint32_t>{b});
  CHECK(c.Lookup("a", 1));
  CHECK(!c.Lookup("b", 1));
  CHECK(!c.Name(b));
  CHECK(c.size() == 2);
  CHECK(x != a);
}

TEST_CASE("re-putting a name with new metadata evicts its old id") {
  ResponseCache c(8);
  std::vector<uint32_t> evicted;
  const uint32_t first = c.Put("a", 1, &evicted);
  const uint32_t second = c.Put("a", 2, &evicted);
  CHECK(evicted == std::vector<uint32_t>{first});
  CHECK(second != first);
  CHECK(*c.Lookup("a", 2) == second);
}

TEST_CASE("a host replaying the coordinator's decisions holds the same cache") {
  ResponseCache coordinator(3), host(3);
  std::vector<uint32_t> evicted;
  for (const char* name : {"a", "b", "c", "d", "b", "e"}) {
    evicted.clear();
    if (coordinator.Lookup(name, 7)) continue;
    const uint32_t id = coordinator.Put(name, 7, &evicted);
    for (uint32_t gone : evicted) host.Evict(gone);
    host.Apply(id, name, 7);
  }
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    CHECK(coordinator.Lookup(name, 7) == host.Lookup(name, 7));
  }
  CHECK(host.size() == 3);
}

TEST_CASE("capacity 0 disables caching") {
  ResponseCache c(0);
  std::vector<uint32_t> evicted;
  c.Put("a", 1, &evicted);
  CHECK(!c.Lookup("a", 1));
}

}  // namespace
}  // namespace ard::negotiation
