// The TensorFlow process's one connection to its host's allreduced daemon, shared by every op
// kernel. Created by allreduced_tf_init() (called from Python through ctypes: hvd.init()) and
// destroyed by allreduced_tf_shutdown(). Thread-safe.
#pragma once

#include "client/allreduced_client.h"

namespace ard::tf {

// The connected client, or nullptr (with `*why` set) before init or after shutdown.
ard_client* GlobalClient(const char** why);

}  // namespace ard::tf

extern "C" {
// 0 on success, else a client code with a message in `err`. Idempotent once connected.
__attribute__((visibility("default"))) int allreduced_tf_init(char* err, size_t err_len);
__attribute__((visibility("default"))) void allreduced_tf_shutdown();
// rank, size, local_rank, local_size, cross_rank, cross_size; -1 each before init.
__attribute__((visibility("default"))) void allreduced_tf_topology(int* out6);
}
