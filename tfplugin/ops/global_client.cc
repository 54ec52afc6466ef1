#include "tfplugin/ops/global_client.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace ard::tf {
namespace {

std::mutex mu;
std::map<int, ard_client*> clients;  // guarded by mu; process set id -> connection
ard_topology topology{-1, -1, -1, -1, -1, -1};

}  // namespace

ard_client* ProcessSetClient(int process_set, const char** why) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = clients.find(process_set);
  if (it != clients.end()) return it->second;
  if (clients.count(0) == 0) {
    *why = "allreduced is not initialized: call allreduced.tensorflow.init()";
  } else {
    *why = "this process is not a member of the process set used by this op";
  }
  return nullptr;
}

}  // namespace ard::tf

using ard::tf::clients;
using ard::tf::mu;
using ard::tf::topology;

extern "C" int allreduced_tf_init(char* err, size_t err_len) {
  std::lock_guard<std::mutex> lock(mu);
  if (clients.count(0) != 0) return 0;
  ard_options options;
  ard_options_init(&options);
  ard_client* client = nullptr;
  const int code = ard_client_create(&options, &client, err, err_len);
  if (code != 0) return code;
  clients[0] = client;
  ard_client_topology(client, &topology);
  return 0;
}

extern "C" void allreduced_tf_shutdown() {
  std::lock_guard<std::mutex> lock(mu);
  // Sets first: their jobs end while the global connection still stands.
  for (auto it = clients.rbegin(); it != clients.rend(); ++it) ard_client_destroy(it->second);
  clients.clear();
  topology = ard_topology{-1, -1, -1, -1, -1, -1};
}

extern "C" const char* allreduced_tf_job() {
  std::lock_guard<std::mutex> lock(mu);
  auto it = clients.find(0);
  return it == clients.end() ? "" : ard_client_job(it->second);
}

extern "C" int allreduced_tf_hosts_updated() {
  std::lock_guard<std::mutex> lock(mu);
  return clients.count(0) != 0 ? ard_client_hosts_updated(clients[0]) : 0;
}

extern "C" void allreduced_tf_topology(int* out6) {
  std::lock_guard<std::mutex> lock(mu);
  const int values[6] = {topology.rank,       topology.size,       topology.local_rank,
                         topology.local_size, topology.cross_rank, topology.cross_size};
  for (int i = 0; i < 6; ++i) out6[i] = values[i];
}

extern "C" int allreduced_tf_add_process_set(int id, int rank, int size, int local_rank,
                                             int local_size, char* err, size_t err_len) {
  std::string name;  // the global job's name (ALLREDUCED_JOB, the launcher's, ...) + ".ps<id>"
  {
    std::lock_guard<std::mutex> lock(mu);
    if (clients.count(0) == 0) {
      std::snprintf(err, err_len, "allreduced is not initialized: call init() first");
      return ARD_FAILED_PRECONDITION;
    }
    if (id <= 0 || clients.count(id) != 0) {
      std::snprintf(err, err_len, "process set id %d is invalid or already connected", id);
      return ARD_INVALID_ARGUMENT;
    }
    name = std::string(ard_client_job(clients[0])) + ".ps" + std::to_string(id);
  }
  ard_options options;
  ard_options_init(&options);
  options.job = name.c_str();
  options.rank = rank;
  options.size = size;
  options.local_rank = local_rank;
  options.local_size = local_size;
  // Outside the lock: forming waits for the set's other ranks, while ops keep running.
  ard_client* client = nullptr;
  const int code = ard_client_create(&options, &client, err, err_len);
  if (code != 0) return code;
  std::lock_guard<std::mutex> lock(mu);
  if (clients.count(id) != 0) {
    ard_client_destroy(client);
    std::snprintf(err, err_len, "process set id %d was connected concurrently", id);
    return ARD_INVALID_ARGUMENT;
  }
  clients[id] = client;
  return 0;
}

extern "C" void allreduced_tf_remove_process_set(int id) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = clients.find(id);
  if (id == 0 || it == clients.end()) return;
  ard_client_destroy(it->second);
  clients.erase(it);
}

extern "C" int allreduced_tf_gpu_kernels() {
#ifdef ARD_TF_GPU_KERNELS
  return 1;
#else
  return 0;
#endif
}
