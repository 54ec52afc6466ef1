#include "daemon/jobs/negotiator_choice.h"

#include "daemon/common/status_macros.h"
#include "daemon/jobs/coordinated_negotiator.h"
#include "daemon/jobs/local_negotiator.h"
#include "daemon/jobs/steady_negotiator.h"

namespace ard::jobs {

std::unique_ptr<Negotiator> ChooseNegotiator(const NegotiatorDeps& deps, const std::string& name,
                                             int size, int local_size, ElasticSpec spec) {
  if (spec.coordinated || local_size < size) {
    ARD_CHECK(deps.coordinator != nullptr);  // admission refused cross-host jobs without one
    auto central =
        std::make_unique<CoordinatedNegotiator>(deps.loop, *deps.coordinator, deps.options,
                                                deps.data_address, name, size, local_size, spec);
    if (!deps.options.steady_state) return central;
    return std::make_unique<SteadyNegotiator>(deps.loop, deps.options, name, std::move(central));
  }
  return std::make_unique<LocalNegotiator>(deps.options, size, spec.max_np);
}

}  // namespace ard::jobs
