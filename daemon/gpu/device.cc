#include "daemon/gpu/device.h"

#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ard::gpu {

bool DeviceReductionSupported(wire::DataType dtype) {
  switch (dtype) {
    case wire::DataType::kUint8:
    case wire::DataType::kInt8:
    case wire::DataType::kInt32:
    case wire::DataType::kInt64:
    case wire::DataType::kFloat16:
    case wire::DataType::kBfloat16:
    case wire::DataType::kFloat32:
    case wire::DataType::kFloat64:
      return true;
    default:
      return false;
  }
}

namespace {
constexpr char kStickyPayload[] = "type.allreduced/gpu.sticky";  // marks a sticky error
}  // namespace

absl::Status AwaitReady(const std::vector<std::unique_ptr<Communicator>>& comms,
                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status status;
  for (const auto& comm : comms) {
    while (status.ok()) {
      absl::StatusOr<CommState> state = comm->State();
      if (!state.ok()) {
        status = state.status();
      } else if (*state == CommState::kReady) {
        break;
      } else if (absl::Now() >= deadline) {
        status = absl::DeadlineExceededError(
            absl::StrCat("communicator not ready within ", absl::FormatDuration(timeout)));
      } else {
        std::this_thread::yield();
      }
    }
  }
  if (!status.ok()) {
    for (const auto& comm : comms) comm->Abort();
  }
  return status;
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitCommunicatorsAndWait(
    Device& device, const UniqueId& id, int size, const std::vector<CommRank>& local,
    absl::Duration timeout) {
  auto comms = device.InitCommunicators(id, size, local);
  if (!comms.ok()) return comms.status();
  if (absl::Status st = AwaitReady(*comms, timeout); !st.ok()) return st;
  return comms;
}

absl::Status StickyError(absl::Status status) {
  status.SetPayload(kStickyPayload, absl::Cord("1"));
  return status;
}

bool IsStickyError(const absl::Status& status) {
  return status.GetPayload(kStickyPayload).has_value();
}

}  // namespace ard::gpu
