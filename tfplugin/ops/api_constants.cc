#include "tfplugin/ops/api_constants.h"

#include "client/allreduced_client.h"

namespace {

// One ARD_TF_CONSTANT(NAME) line per ARD_* enumerator of the header.
#define ARD_TF_CONSTANT(name) #name,
const char* const kNames[] = {
#include "tfplugin/ops/api_constant_names.inc"
};
#undef ARD_TF_CONSTANT

#define ARD_TF_CONSTANT(name) name,
const int kValues[] = {
#include "tfplugin/ops/api_constant_names.inc"
};
#undef ARD_TF_CONSTANT

static_assert(sizeof(kNames) / sizeof(kNames[0]) == sizeof(kValues) / sizeof(kValues[0]),
              "one value per name");

}  // namespace

extern "C" int allreduced_tf_constants(const char* const** names, const int** values) {
  *names = kNames;
  *values = kValues;
  return static_cast<int>(sizeof(kValues) / sizeof(kValues[0]));
}
