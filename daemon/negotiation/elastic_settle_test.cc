// ElasticSettled: max_np present, the expected members here, or the settle window passed.
#include "daemon/negotiation/elastic_settle.h"

#include "catch2/catch.hpp"

namespace ard::negotiation {
namespace {

TEST_CASE("an elastic generation forms at max_np, with everyone expected, or once settled") {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);
  ElasticArrivals a{/*present=*/2, /*max_np=*/4, /*expected_here=*/false, t0, kElasticSettle};
  CHECK_FALSE(ElasticSettled(a, t0));
  CHECK_FALSE(ElasticSettled(a, t0 + kElasticSettle - absl::Milliseconds(1)));
  CHECK(ElasticSettled(a, t0 + kElasticSettle));
  a.expected_here = true;
  CHECK(ElasticSettled(a, t0));
  a.expected_here = false;
  a.present = 4;
  CHECK(ElasticSettled(a, t0));
  a.max_np = 0;  // no bound: present counts for nothing
  CHECK_FALSE(ElasticSettled(a, t0));
  // The launcher's local size: no timer, only the expected ones (or max_np).
  a.settle = absl::InfiniteDuration();
  CHECK_FALSE(ElasticSettled(a, t0 + absl::Hours(24)));
  a.expected_here = true;
  CHECK(ElasticSettled(a, t0));
}

}  // namespace
}  // namespace ard::negotiation
