#include "daemon/negotiation/elastic_settle.h"

namespace ard::negotiation {

bool ElasticSettled(const ElasticArrivals& arrivals, absl::Time now) {
  if (arrivals.max_np > 0 && arrivals.present >= arrivals.max_np) return true;
  return arrivals.expected_here || now - arrivals.last_change >= arrivals.settle;
}

}  // namespace ard::negotiation
