#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "catch2/catch.hpp"
#include "daemon/shm/input_arena.h"
#include "daemon/shm/result_arena.h"
#include "daemon/shm/slot_allocator.h"

namespace ard::shm {
namespace {

int Memfd(uint64_t bytes, bool seal) {
  int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, bytes) == 0);
  if (seal) REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  return fd;
}

TEST_CASE("SlotAllocator aligns, fills first fit and coalesces on free") {
  SlotAllocator a(1024, 64);
  auto x = a.Allocate(1);
  auto y = a.Allocate(100);
  auto z = a.Allocate(64);
  REQUIRE((x && y && z));
  CHECK(*x == 0);
  CHECK(*y == 64);
  CHECK(*z == 192);
  CHECK(a.used_bytes() == 64 + 128 + 64);
  CHECK(a.Free(*y));
  CHECK(!a.Free(*y));  // double free is refused
  CHECK(a.Free(*x));
  CHECK(a.Free(*z));
  CHECK(a.empty());
  auto whole = a.Allocate(1024);  // everything coalesced back into one range
  REQUIRE(whole);
  CHECK(*whole == 0);
  CHECK(!a.Allocate(1));
  CHECK(!SlotAllocator(1024, 64).Allocate(2048));
}

TEST_CASE("ResultArena grows by segments up to its cap and frees when slots are dropped") {
  auto arena = ResultArena::Create("job", 4096, 1 << 22);
  REQUIRE(arena.ok());
  int added = -2;
  auto small = (*arena)->Allocate(1000, &added);
  REQUIRE(small.ok());
  CHECK(added == -1);
  memset((*small)->data, 7, 1000);
  auto big = (*arena)->Allocate(1 << 20, &added);
  REQUIRE(big.ok());
  CHECK(added == 1);
  CHECK((*arena)->segment(1)->readonly_fd() >= 0);
  auto too_big = (*arena)->Allocate(8 << 20, &added);
  CHECK(too_big.status().code() == absl::StatusCode::kResourceExhausted);
  const uint64_t used = (*arena)->used_bytes();
  big->reset();
  CHECK((*arena)->used_bytes() < used);
  small->reset();
  CHECK((*arena)->used_bytes() == 0);
}

TEST_CASE("result segments reach clients read-only") {
  auto arena = ResultArena::Create("job", 4096, 1 << 20);
  REQUIRE(arena.ok());
  const int ro = (*arena)->segment(0)->readonly_fd();
  void* w = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0);
  CHECK(w == MAP_FAILED);
  void* r = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, ro, 0);
  REQUIRE(r != MAP_FAILED);
  (*arena)->segment(0)->data()[5] = 42;
  CHECK(static_cast<uint8_t*>(r)[5] == 42);
  munmap(r, 4096);
  CHECK(ftruncate(ro, 0) != 0);
}

TEST_CASE("InputArena checks seals, sizes, indexes and bounds") {
  InputArena arena(1 << 20);
  CHECK(arena.AddSegment(0, Memfd(4096, false), 4096).code() ==
        absl::StatusCode::kInvalidArgument);  // no F_SEAL_SHRINK
  CHECK(arena.AddSegment(0, Memfd(4096, true), 8192).code() ==
        absl::StatusCode::kInvalidArgument);  // smaller than declared
  CHECK(arena.AddSegment(1, Memfd(4096, true), 4096).code() ==
        absl::StatusCode::kInvalidArgument);  // not the next index
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  close(pipefd[1]);
  CHECK(!arena.AddSegment(0, pipefd[0], 4096).ok());  // not a memfd at all
  REQUIRE(arena.AddSegment(0, Memfd(4096, true), 4096).ok());
  CHECK(arena.AddSegment(1, Memfd(2 << 20, true), 2 << 20).code() ==
        absl::StatusCode::kResourceExhausted);  // over the per-process cap
  auto ok = arena.Resolve(0, 64, 4032);
  REQUIRE(ok.ok());
  CHECK(ok->bytes == 4032);
  CHECK(arena.Resolve(0, 64, 4033).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(arena.Resolve(0, UINT64_MAX - 8, 64).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(arena.Resolve(3, 0, 1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(arena.Resolve(9, 0, 0).ok());  // empty tensors need no memory
}

}  // namespace
}  // namespace ard::shm
