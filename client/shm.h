// RAII owners for the client's kernel handles: file descriptors, memory mappings, and the sealed
// memfds that back input-arena segments (DESIGN.md "Shared memory"). Move-only values; a single
// object is not synchronised, distinct objects may be used from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "client/status.h"

namespace ard::client {

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Owns one shared mapping of a whole file; unmaps it on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { Reset(); }

  // Maps `bytes` of `fd` MAP_SHARED, read-write or read-only. Checks with fstat that the file is
  // at least `bytes` long (a shorter file would SIGBUS on access).
  static Status Map(int fd, uint64_t bytes, bool writable, Mapping* out);

  char* data() const { return static_cast<char*>(addr_); }
  uint64_t size() const { return bytes_; }
  bool valid() const { return addr_ != nullptr; }
  void Reset();

 private:
  void* addr_ = nullptr;
  uint64_t bytes_ = 0;
};

// memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), sized to `bytes` (sparse), sealed with
// F_SEAL_SHRINK only: the daemon's mapping can never SIGBUS, the memfd may still grow, and no
// F_SEAL_SEAL, so nothing stops the daemon from adding seals of its own.
Status CreateSealedMemfd(const char* name, uint64_t bytes, UniqueFd* out);

}  // namespace ard::client
