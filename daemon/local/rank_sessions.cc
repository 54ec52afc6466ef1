#include "daemon/local/rank_sessions.h"

#include <string>

#include "daemon/local/frame_codec.h"

namespace ard::local {

void SendComplete(Session& session, const negotiation::TensorRequest& request,
                  const absl::Status& status, const dataplane::RankResult* result,
                  int join_last_rank) {
  wire::Complete c{};
  c.code = static_cast<int32_t>(status.code());
  c.join_last_rank = join_last_rank;
  std::vector<int64_t> splits;
  std::shared_ptr<shm::ResultSlot> slot;
  if (status.ok() && result != nullptr) {
    slot = result->slot;
    if (slot) {
      c.segment = slot->segment;
      c.offset = slot->offset;
      c.bytes = slot->bytes;
    }
    c.ndims = static_cast<uint32_t>(result->shape.size());
    for (size_t d = 0; d < result->shape.size() && d < wire::kMaxDims; ++d) {
      c.shape[d] = result->shape[d];
    }
    splits = result->splits;
  }
  // The name is free and the slot held before the client can see the COMPLETE.
  session.EndRequest(request.request_id, slot);
  session.Send(EncodeComplete(request.request_id, c, splits,
                              status.ok() ? "" : std::string(status.message())));
}

void RankSessions::AnnounceSegment(uint32_t index, const shm::MappedSegment& segment) {
  const std::string frame =
      EncodeSegment(wire::MsgType::kResultSegment, wire::Segment{index, 0, segment.size()});
  for (const auto& session : ranks_) {
    if (session != nullptr) session->Send(frame, segment.readonly_fd());
  }
}

void RankSessions::Complete(int rank, const negotiation::TensorRequest& request,
                            const absl::Status& status, const dataplane::RankResult* result,
                            int join_last_rank) {
  if (rank < 0 || static_cast<size_t>(rank) >= ranks_.size() || ranks_[rank] == nullptr) return;
  SendComplete(*ranks_[rank], request, status, result, join_last_rank);
}

}  // namespace ard::local
