// The input arena: alignment, first fit with coalescing, growth announced before use, the cap.
#include <fcntl.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "client/arena.h"

namespace ard::client {
namespace {

struct Published {
  uint32_t index;
  uint64_t bytes;
  int seals;
};

std::unique_ptr<InputArena> MakeArena(uint64_t first, uint64_t max,
                                      std::vector<Published>* published) {
  std::unique_ptr<InputArena> arena;
  Status status = InputArena::Create(
      first, max,
      [published](uint32_t index, int fd, uint64_t bytes) {
        published->push_back({index, bytes, ::fcntl(fd, F_GET_SEALS)});
        return OkStatus();
      },
      &arena);
  REQUIRE(status.ok());
  return arena;
}

InputArena::Slot MustAllocate(InputArena& arena, uint64_t bytes) {
  InputArena::Slot slot;
  Status status = arena.Allocate(bytes, &slot);
  INFO(status.message());
  REQUIRE(status.ok());
  return slot;
}

TEST_CASE("segment 0 is a sealed memfd and slots are 64-byte aligned") {
  std::vector<Published> published;
  auto arena = MakeArena(64 << 10, 1 << 20, &published);
  int seals = ::fcntl(arena->first_segment_fd(), F_GET_SEALS);
  CHECK((seals & F_SEAL_SHRINK) != 0);
  CHECK((seals & F_SEAL_SEAL) == 0);
  CHECK((seals & F_SEAL_GROW) == 0);
  CHECK(arena->first_segment_bytes() == (64u << 10));
  InputArena::Slot a = MustAllocate(*arena, 1);
  InputArena::Slot b = MustAllocate(*arena, 65);
  InputArena::Slot c = MustAllocate(*arena, 64);
  CHECK(a.offset == 0);
  CHECK(b.offset == 64);
  CHECK(c.offset == 192);
  for (auto& s : {a, b, c}) {
    CHECK(s.offset % 64 == 0);
    CHECK(reinterpret_cast<uintptr_t>(s.data) % 64 == 0);
  }
  b.data[64] = 'x';  // the whole rounded slot is writable
  CHECK(published.empty());
}

TEST_CASE("freed neighbours coalesce and first fit reuses them") {
  std::vector<Published> published;
  auto arena = MakeArena(4096, 1 << 20, &published);
  std::vector<InputArena::Slot> slots;
  for (int i = 0; i < 4; ++i) slots.push_back(MustAllocate(*arena, 1024));
  CHECK(arena->free_bytes() == 0);
  arena->Free(slots[1]);
  arena->Free(slots[3]);
  CHECK(arena->free_block_count() == 2);
  arena->Free(slots[2]);  // joins 1 and 3
  CHECK(arena->free_block_count() == 1);
  InputArena::Slot big = MustAllocate(*arena, 3072);
  CHECK(big.offset == 1024);
  CHECK(published.empty());
  arena->Free(big);
  arena->Free(slots[0]);
  CHECK(arena->free_block_count() == 1);
  CHECK(arena->free_bytes() == 4096);
}

TEST_CASE("growth publishes a segment of max(2x last, request) before handing it out") {
  std::vector<Published> published;
  std::unique_ptr<InputArena> arena;
  InputArena* raw = nullptr;
  REQUIRE(InputArena::Create(
              4096, 1 << 30,
              [&](uint32_t index, int fd, uint64_t bytes) {
                CHECK(raw->segment_count() == index);  // not usable before it is announced
                published.push_back({index, bytes, ::fcntl(fd, F_GET_SEALS)});
                return OkStatus();
              },
              &arena)
              .ok());
  raw = arena.get();
  MustAllocate(*arena, 4096);
  InputArena::Slot s1 = MustAllocate(*arena, 100);
  InputArena::Slot s2 = MustAllocate(*arena, 100000);
  REQUIRE(published.size() == 2);
  CHECK(published[0].index == 1);
  CHECK(published[0].bytes == 8192);
  CHECK((published[0].seals & F_SEAL_SHRINK) != 0);
  CHECK(published[1].index == 2);
  CHECK(published[1].bytes == 102400);  // the request rounded up to pages beats 2x 8 KiB
  CHECK(s1.segment == 1);
  CHECK(s2.segment == 2);
  CHECK(arena->segment_count() == 3);
}

TEST_CASE("the cap returns RESOURCE_EXHAUSTED; a failed publish adds nothing") {
  std::vector<Published> published;
  auto arena = MakeArena(64 << 10, 96 << 10, &published);
  InputArena::Slot a = MustAllocate(*arena, 60 << 10);
  InputArena::Slot b = MustAllocate(*arena, 30 << 10);  // grows by the 32 KiB left under the cap
  CHECK(published.back().bytes == (32u << 10));
  InputArena::Slot c;
  Status status = arena->Allocate(10 << 10, &c);
  CHECK(status.code() == wire::Code::kResourceExhausted);
  CHECK(status.message().find("ALLREDUCED_ARENA_MAX_BYTES") != std::string::npos);
  arena->Free(a);
  CHECK(arena->Allocate(10 << 10, &c).ok());

  std::unique_ptr<InputArena> failing;
  REQUIRE(InputArena::Create(
              4096, 1 << 20,
              [](uint32_t, int, uint64_t) { return Unavailable("socket closed"); }, &failing)
              .ok());
  MustAllocate(*failing, 4096);
  CHECK(failing->Allocate(64, &c).code() == wire::Code::kUnavailable);
  CHECK(failing->segment_count() == 1);
  (void)b;
}

TEST_CASE("concurrent growth announces dense indexes in order; slots never overlap") {
  std::mutex mu;
  std::vector<uint32_t> order;
  std::unique_ptr<InputArena> arena;
  REQUIRE(InputArena::Create(
              4096, 1ull << 32,
              [&](uint32_t index, int, uint64_t) {
                std::lock_guard<std::mutex> lock(mu);
                order.push_back(index);
                return OkStatus();
              },
              &arena)
              .ok());
  std::vector<std::vector<InputArena::Slot>> slots(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 300; ++i) {
        InputArena::Slot slot;
        if (arena->Allocate(1 + rng() % 20000, &slot).ok()) slots[t].push_back(slot);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == i + 1);
  CHECK(arena->segment_count() == order.size() + 1);
  std::vector<InputArena::Slot> all;
  for (auto& v : slots) all.insert(all.end(), v.begin(), v.end());
  CHECK(all.size() == 8 * 300);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.segment != b.segment ? a.segment < b.segment : a.offset < b.offset;
  });
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i].segment == all[i - 1].segment) {
      CHECK(all[i - 1].offset + all[i - 1].bytes <= all[i].offset);
    }
  }
  for (auto& s : all) arena->Free(s);
  CHECK(arena->free_bytes() == arena->total_bytes());
}

TEST_CASE("many random alloc/free cycles leave no leak and one free block per segment") {
  std::vector<Published> published;
  auto arena = MakeArena(64 << 10, 16 << 20, &published);
  std::mt19937 rng(7);
  std::vector<InputArena::Slot> live;
  for (int i = 0; i < 20000; ++i) {
    if (!live.empty() && (rng() % 2 == 0 || live.size() > 200)) {
      size_t k = rng() % live.size();
      arena->Free(live[k]);
      live[k] = live.back();
      live.pop_back();
    } else {
      live.push_back(MustAllocate(*arena, 1 + rng() % 8192));
    }
  }
  for (auto& s : live) arena->Free(s);
  CHECK(arena->free_bytes() == arena->total_bytes());
  CHECK(arena->free_block_count() == arena->segment_count());
  CHECK(arena->total_bytes() <= (8u << 20));  // bounded by the peak, not by the cycle count
}

}  // namespace
}  // namespace ard::client
