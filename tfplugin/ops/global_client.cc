#include "tfplugin/ops/global_client.h"

#include <mutex>

namespace ard::tf {
namespace {

std::mutex mu;
ard_client* client = nullptr;  // guarded by mu; the one shared connection of this process
ard_topology topology{-1, -1, -1, -1, -1, -1};

}  // namespace

ard_client* GlobalClient(const char** why) {
  std::lock_guard<std::mutex> lock(mu);
  if (client == nullptr) *why = "allreduced is not initialized: call allreduced.tensorflow.init()";
  return client;
}

}  // namespace ard::tf

using ard::tf::client;
using ard::tf::mu;
using ard::tf::topology;

extern "C" int allreduced_tf_init(char* err, size_t err_len) {
  std::lock_guard<std::mutex> lock(mu);
  if (client != nullptr) return 0;
  ard_options options;
  ard_options_init(&options);
  const int code = ard_client_create(&options, &client, err, err_len);
  if (code == 0) ard_client_topology(client, &topology);
  return code;
}

extern "C" void allreduced_tf_shutdown() {
  std::lock_guard<std::mutex> lock(mu);
  ard_client_destroy(client);
  client = nullptr;
  topology = ard_topology{-1, -1, -1, -1, -1, -1};
}

extern "C" void allreduced_tf_topology(int* out6) {
  std::lock_guard<std::mutex> lock(mu);
  const int values[6] = {topology.rank,       topology.size,       topology.local_rank,
                         topology.local_size, topology.cross_rank, topology.cross_size};
  for (int i = 0; i < 6; ++i) out6[i] = values[i];
}
