#include "daemon/shm/mapped_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ard::shm {
namespace {

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

}  // namespace

absl::StatusOr<std::shared_ptr<MappedSegment>> MappedSegment::MapClientSegment(
    int fd, uint64_t declared_bytes) {
  struct CloseFd {
    int fd;
    ~CloseFd() { close(fd); }
  } closer{fd};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return absl::InvalidArgumentError("arena segment is not a sealable memfd (F_GET_SEALS failed)");
  }
  if ((seals & F_SEAL_SHRINK) == 0) {
    return absl::InvalidArgumentError("arena segment memfd lacks F_SEAL_SHRINK");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::InternalError(Errno("fstat"));
  if (static_cast<uint64_t>(st.st_size) < declared_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("arena segment declared as ", declared_bytes,
                                                   " bytes but the memfd has ", st.st_size));
  }
  void* p = mmap(nullptr, declared_bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(Errno("mmap of client arena segment"));
  }
  return std::shared_ptr<MappedSegment>(
      new MappedSegment(static_cast<uint8_t*>(p), declared_bytes, -1));
}

absl::StatusOr<std::shared_ptr<MappedSegment>> MappedSegment::CreateResultSegment(
    const std::string& name, uint64_t bytes) {
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::ResourceExhaustedError(Errno("memfd_create"));
  struct CloseFd {
    int fd;
    ~CloseFd() { close(fd); }
  } closer{fd};
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return absl::ResourceExhaustedError(Errno("ftruncate result segment"));
  }
  // Clients map this too: nobody may shrink it.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    return absl::InternalError(Errno("F_ADD_SEALS"));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return absl::ResourceExhaustedError(Errno("mmap result segment"));
  // A new open file description, read-only: a client cannot mmap it PROT_WRITE.
  const std::string self = absl::StrCat("/proc/self/fd/", fd);
  const int ro = open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) {
    munmap(p, bytes);
    return absl::InternalError(Errno("reopen result segment read-only"));
  }
  return std::shared_ptr<MappedSegment>(new MappedSegment(static_cast<uint8_t*>(p), bytes, ro));
}

MappedSegment::~MappedSegment() {
  munmap(data_, size_);
  if (readonly_fd_ >= 0) close(readonly_fd_);
}

}  // namespace ard::shm
