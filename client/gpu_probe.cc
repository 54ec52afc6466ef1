// ard_gpu_probe: the C entry point that checks the client's GPU path end to end on one device.
#include <cstdio>

#include "client/allreduced_client.h"
#include "client/gpu_staging.h"

extern "C" int ard_gpu_probe(int device, char* err, size_t err_len) {
  std::unique_ptr<ard::client::GpuStaging> staging;
  ard::client::Status status = ard::client::GpuStaging::Create(device, 1 << 20, 1, &staging);
  if (!status.ok() && err != nullptr && err_len > 0) {
    std::snprintf(err, err_len, "%s", status.message().c_str());
  }
  return status.raw_code();
}
