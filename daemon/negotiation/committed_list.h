// One coordinator list (DESIGN.md "Steady state without the coordinator"): the responses one
// JobEvent commits, in order, with the response-cache decisions it carries. Every host of a job
// receives the lists in one stream order. Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

struct CommittedList {
  std::vector<Response> responses;
  std::vector<uint32_t> cache_evict;
  std::vector<std::pair<uint32_t, std::string>> cache_put;  // id, tensor name
};

}  // namespace ard::negotiation
