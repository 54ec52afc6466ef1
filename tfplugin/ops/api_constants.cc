#include "tfplugin/ops/api_constants.h"

#include "client/allreduced_client.h"

extern "C" int allreduced_tf_constants(const char* const** names, const int** values) {
  return ard_constants(names, values);
}
