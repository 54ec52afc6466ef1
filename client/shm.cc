#include "client/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

namespace ard::client {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) Reset(other.Release());
  return *this;
}

int UniqueFd::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Mapping::Mapping(Mapping&& other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    Reset();
    addr_ = std::exchange(other.addr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void Mapping::Reset() {
  if (addr_ != nullptr) ::munmap(addr_, bytes_);
  addr_ = nullptr;
  bytes_ = 0;
}

Status Mapping::Map(int fd, uint64_t bytes, bool writable, Mapping* out) {
  if (bytes == 0) return InvalidArgument("cannot map an empty segment");
  struct stat st;
  if (::fstat(fd, &st) != 0) return Internal(ErrnoMessage("fstat", errno));
  if (static_cast<uint64_t>(st.st_size) < bytes) {
    return Internal("segment file has " + std::to_string(st.st_size) + " bytes, expected " +
                    std::to_string(bytes));
  }
  int prot = writable ? (PROT_READ | PROT_WRITE) : PROT_READ;
  void* addr = ::mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) {
    return ResourceExhausted(ErrnoMessage("mmap of " + std::to_string(bytes) + " bytes", errno));
  }
  out->Reset();
  out->addr_ = addr;
  out->bytes_ = bytes;
  return OkStatus();
}

Status CreateSealedMemfd(const char* name, uint64_t bytes, UniqueFd* out) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ResourceExhausted(ErrnoMessage("memfd_create", errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return ResourceExhausted(
        ErrnoMessage("ftruncate of a memfd to " + std::to_string(bytes) + " bytes", errno));
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
    return Internal(ErrnoMessage("fcntl(F_ADD_SEALS, F_SEAL_SHRINK)", errno));
  }
  *out = std::move(fd);
  return OkStatus();
}

}  // namespace ard::client
