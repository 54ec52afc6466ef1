// One shared-memory segment mapped into the daemon (DESIGN.md "Shared memory").
//  - A client's input segment: a memfd the client created and passed over the local socket.
//    Mapped read-only. It must carry F_SEAL_SHRINK, so the client can never truncate it under the
//    daemon's mapping (which would turn a read into SIGBUS), and be at least as large as declared.
//  - A job's result segment: a memfd the daemon creates, mapped read-write here; clients get a
//    descriptor re-opened O_RDONLY, so they can map it only read-only.
// Immutable after creation; any thread. Shared (shared_ptr) by whoever may still read it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ard::shm {

class MappedSegment {
 public:
  // Takes ownership of `fd` (closed in every case).
  static absl::StatusOr<std::shared_ptr<MappedSegment>> MapClientSegment(int fd,
                                                                         uint64_t declared_bytes);
  static absl::StatusOr<std::shared_ptr<MappedSegment>> CreateResultSegment(
      const std::string& name, uint64_t bytes);

  ~MappedSegment();
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Result segments: a read-only descriptor to pass to clients (owned by this object; -1 for
  // client segments).
  int readonly_fd() const { return readonly_fd_; }

 private:
  MappedSegment(uint8_t* data, uint64_t size, int readonly_fd)
      : data_(data), size_(size), readonly_fd_(readonly_fd) {}

  uint8_t* const data_;
  const uint64_t size_;
  const int readonly_fd_;
};

}  // namespace ard::shm
