// ard_constants: the header's ARD_* enumerators by name. The names come from the header itself at
// build time (genrule api_constant_names in client/BUILD) and the values are compiled from it, so
// nothing here can disagree with allreduced_client.h. Immutable; any thread.
#include "client/allreduced_client.h"

namespace {

#define ARD_CONSTANT(name) #name,
const char* const kNames[] = {
#include "client/api_constant_names.inc"
};
#undef ARD_CONSTANT

#define ARD_CONSTANT(name) name,
const int kValues[] = {
#include "client/api_constant_names.inc"
};
#undef ARD_CONSTANT

static_assert(sizeof(kNames) / sizeof(kNames[0]) == sizeof(kValues) / sizeof(kValues[0]),
              "one value per name");

}  // namespace

extern "C" ARD_API int ard_constants(const char* const** names, const int** values) {
  *names = kNames;
  *values = kValues;
  return static_cast<int>(sizeof(kValues) / sizeof(kValues[0]));
}
