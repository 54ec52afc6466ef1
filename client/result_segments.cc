#include "client/result_segments.h"

#include <string>
#include <utility>

namespace ard::client {

Status ResultSegments::Map(uint32_t index, UniqueFd fd, uint64_t bytes) {
  if (index >= wire::kMaxSegments) {
    return Internal("result segment index " + std::to_string(index) + " out of range");
  }
  if (segments_[index].valid()) {
    return Internal("result segment " + std::to_string(index) + " announced twice");
  }
  if (!fd.valid()) return Internal("result segment " + std::to_string(index) + " without an fd");
  Status status = Mapping::Map(fd.get(), bytes, /*writable=*/false, &segments_[index]);
  if (!status.ok()) {
    return Internal("result segment " + std::to_string(index) + ": " + status.message());
  }
  return OkStatus();
}

Status ResultSegments::Locate(uint32_t segment, uint64_t offset, uint64_t bytes,
                              const void** data) const {
  if (segment >= wire::kMaxSegments || !segments_[segment].valid()) {
    return Internal("result in unknown result segment " + std::to_string(segment));
  }
  const Mapping& mapping = segments_[segment];
  if (offset > mapping.size() || bytes > mapping.size() - offset) {
    return Internal("result [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                    ") outside result segment " + std::to_string(segment) + " of " +
                    std::to_string(mapping.size()) + " bytes");
  }
  *data = mapping.data() + offset;
  return OkStatus();
}

}  // namespace ard::client
