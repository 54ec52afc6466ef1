// The TensorFlow process's connections to its host's allreduced daemon, shared by every op kernel:
// the global job's (process set 0), created by allreduced_tf_init() (hvd.init() through ctypes),
// and one per process set this process belongs to, each registered as its own sub-job
// "<job>.ps<id>" so the daemon negotiates and reduces among the set's ranks only. Thread-safe.
#pragma once

#include "client/allreduced_client.h"

namespace ard::tf {

// The connection of `process_set` (0: the global set), or nullptr with `*why` set before init,
// after shutdown, or when this process is not in that set.
ard_client* ProcessSetClient(int process_set, const char** why);

}  // namespace ard::tf

extern "C" {
// 0 on success, else a client code with a message in `err`. Idempotent once connected.
__attribute__((visibility("default"))) int allreduced_tf_init(char* err, size_t err_len);
// Closes every connection (process sets included).
__attribute__((visibility("default"))) void allreduced_tf_shutdown();
// 1 when the daemon said ranks wait to join this elastic job (ard_client_hosts_updated).
__attribute__((visibility("default"))) int allreduced_tf_hosts_updated();
// rank, size, local_rank, local_size, cross_rank, cross_size; -1 each before init.
__attribute__((visibility("default"))) void allreduced_tf_topology(int* out6);
// The global job's name ("" before init), for the timeline (allreducectl timeline --job).
__attribute__((visibility("default"))) const char* allreduced_tf_job();
// Connects this process to process set `id` (> 0) as `rank` of `size`, `local_rank` of
// `local_size` of the set's ranks on this host; waits until the set's job formed. 0 or a code.
__attribute__((visibility("default"))) int allreduced_tf_add_process_set(
    int id, int rank, int size, int local_rank, int local_size, char* err, size_t err_len);
// Disconnects from process set `id` (nothing when not connected).
__attribute__((visibility("default"))) void allreduced_tf_remove_process_set(int id);
// 1 when this library has GPU kernels (a CUDA build: allreduce of device tensors), else 0.
__attribute__((visibility("default"))) int allreduced_tf_gpu_kernels();
}
