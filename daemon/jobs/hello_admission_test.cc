#include "daemon/jobs/hello_admission.h"

#include <cstring>

#include "catch2/catch.hpp"

namespace ard::jobs {
namespace {

wire::Hello MakeHello(int size, int local_size, uint32_t min_np = 0) {
  wire::Hello h{};
  std::strcpy(h.job, "j");
  h.rank = -1;
  h.size = size;
  h.local_rank = -1;
  h.local_size = local_size;
  h.elastic_min_np = min_np;
  return h;
}

TEST_CASE("HELLO's shape: size, then local size, then one rank") {
  CHECK(ShapeOf(MakeHello(4, -1)).size == 4);
  CHECK(ShapeOf(MakeHello(4, -1)).local_size == 4);
  CHECK(ShapeOf(MakeHello(8, 2)).local_size == 2);
  CHECK(ShapeOf(MakeHello(-1, 3)).size == 3);
  CHECK(ShapeOf(MakeHello(-1, -1)).size == 1);
  const ElasticSpec spec = ElasticSpecOf(MakeHello(-1, 2, 3), true);
  CHECK(spec.min_np == 3);
  CHECK(spec.max_np == 0);
  CHECK(spec.coordinated);
  CHECK(spec.first_local == 2);
}

TEST_CASE("A new fixed job needs cross-host jobs when it spans hosts, and room under max_jobs") {
  const AdmissionLimits single{false, 0, 4};
  CHECK(Admit(MakeHello(2, -1), 1000, 1, nullptr, single).ok());
  CHECK(absl::IsUnimplemented(Admit(MakeHello(4, 2), 1000, 1, nullptr, single)));
  CHECK(Admit(MakeHello(4, 2), 1000, 1, nullptr, {true, 0, 4}).ok());
  CHECK(absl::IsResourceExhausted(Admit(MakeHello(2, -1), 1000, 1, nullptr, {false, 4, 4})));
  // Elastic jobs are bounded by min_np/max_np, not by these.
  CHECK(Admit(MakeHello(-1, -1, 1), 1000, 1, nullptr, {false, 4, 4}).ok());
}

}  // namespace
}  // namespace ard::jobs
