#include "daemon/negotiation/readiness_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/negotiation/validation.h"

namespace ard::negotiation {

ReadinessTable::ReadinessTable(int size)
    : size_(size),
      member_(size, true),
      complete_joins_(true),
      joined_(size, false),
      join_requests_(size) {}

ReadinessTable::ReadinessTable(int size, std::vector<int> members)
    : size_(size),
      member_(size, false),
      complete_joins_(false),
      joined_(size, false),
      join_requests_(size) {
  for (int r : members) member_[r] = true;
}

std::vector<TensorRequest> ReadinessTable::ResetJoins() {
  std::vector<TensorRequest> joins;
  for (auto& r : join_requests_) {
    if (r) joins.push_back(std::move(*r));
  }
  join_requests_.assign(size_, std::nullopt);
  joined_.assign(size_, false);
  joined_count_ = 0;
  return joins;
}

absl::Status ReadinessTable::Submit(TensorRequest request, absl::Time now,
                                    std::vector<Response>* ready) {
  const int rank = request.rank;
  if (rank < 0 || rank >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside job of size ", size_));
  }
  if (request.collective() == wire::Collective::kJoin) {
    if (joined_[rank]) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " has already joined"));
    }
    joined_[rank] = true;
    join_requests_[rank] = std::move(request);
    ++joined_count_;
    // Tensors waiting only for this rank may now be complete.
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (Complete(it->second)) {
        std::string name = it->first;
        Pending p = std::move(it->second);
        it = pending_.erase(it);
        Emit(name, std::move(p), ready);
      } else {
        ++it;
      }
    }
    if (complete_joins_ && joined_count_ == size_) EmitJoin(rank, ready);
    return absl::OkStatus();
  }
  const std::string name = request.name();
  Pending& p = pending_[name];
  if (p.ranks.empty()) {
    p.ranks.resize(size_);
    p.first_seen = now;
  }
  if (p.ranks[rank]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, " is already in flight from rank ", rank,
        " (a name may be submitted again only after its previous collective completed)"));
  }
  p.ranks[rank] = std::move(request);
  ++p.count;
  if (Complete(p)) {
    Pending done = std::move(p);
    pending_.erase(name);
    Emit(name, std::move(done), ready);
  }
  return absl::OkStatus();
}

bool ReadinessTable::Complete(const Pending& p) const {
  for (int r = 0; r < size_; ++r) {
    if (member_[r] && !p.ranks[r] && !joined_[r]) return false;
  }
  return true;
}

void ReadinessTable::Emit(const std::string& name, Pending pending, std::vector<Response>* ready) {
  ReadyTensor tensor{name, std::move(pending.ranks)};
  const TensorRequest& first = tensor.first();
  Response response;
  response.collective = first.collective();
  response.error = ValidateReadyTensor(tensor, size_);
  if (response.error.ok() && complete_joins_ && joined_count_ > 0 &&
      response.collective != wire::Collective::kAllreduce) {
    std::vector<int> joined;
    for (int r = 0; r < size_; ++r) {
      if (joined_[r] && !tensor.ranks[r]) joined.push_back(r);
    }
    if (!joined.empty()) {
      response.error = absl::FailedPreconditionError(absl::StrCat(
          CollectiveName(response.collective), " of ", name,
          " is not supported while ranks have joined (joined: ", absl::StrJoin(joined, ", "),
          "); only ALLREDUCE is"));
    }
  }
  const int group = first.meta.group_id;
  if (group < 0) {
    response.tensors.push_back(std::move(tensor));
    ready->push_back(std::move(response));
    return;
  }
  // Grouped: hold until the whole group is ready; an error fails the whole group (atomic).
  std::vector<ReadyTensor>& members = groups_[group];
  members.push_back(std::move(tensor));
  if (!response.error.ok()) {
    Response failed{response.collective, std::move(members), response.error, -1};
    groups_.erase(group);
    ready->push_back(std::move(failed));
    return;
  }
  if (static_cast<int>(members.size()) < first.meta.group_size) return;
  std::sort(members.begin(), members.end(),
            [](const ReadyTensor& a, const ReadyTensor& b) { return a.name < b.name; });
  response.tensors = std::move(members);
  groups_.erase(group);
  ready->push_back(std::move(response));
}

void ReadinessTable::EmitJoin(int last_rank, std::vector<Response>* ready) {
  Response response;
  response.collective = wire::Collective::kJoin;
  response.join_last_rank = last_rank;
  ReadyTensor tensor{"join", std::move(join_requests_)};
  response.tensors.push_back(std::move(tensor));
  ready->push_back(std::move(response));
  join_requests_.assign(size_, std::nullopt);
  joined_.assign(size_, false);
  joined_count_ = 0;
}

std::vector<TensorRequest> ReadinessTable::TakeAll() {
  std::vector<TensorRequest> all;
  for (auto& [name, p] : pending_) {
    for (auto& r : p.ranks) {
      if (r) all.push_back(std::move(*r));
    }
  }
  pending_.clear();
  for (auto& [group, members] : groups_) {
    for (auto& t : members) {
      for (auto& r : t.ranks) {
        if (r) all.push_back(std::move(*r));
      }
    }
  }
  groups_.clear();
  for (auto& r : join_requests_) {
    if (r) all.push_back(std::move(*r));
  }
  join_requests_.assign(size_, std::nullopt);
  joined_.assign(size_, false);
  joined_count_ = 0;
  return all;
}

std::vector<ReadinessTable::Waiting> ReadinessTable::WaitingLongerThan(
    absl::Time now, absl::Duration min_wait) const {
  std::vector<Waiting> out;
  for (const auto& [name, p] : pending_) {
    if (now - p.first_seen < min_wait) continue;
    Waiting w{name, now - p.first_seen, {}, {}};
    for (int r = 0; r < size_; ++r) {
      if (!member_[r]) continue;
      (p.ranks[r] || joined_[r] ? w.submitted : w.missing).push_back(r);
    }
    out.push_back(std::move(w));
  }
  std::sort(out.begin(), out.end(),
            [](const Waiting& a, const Waiting& b) { return a.waited > b.waited; });
  return out;
}

}  // namespace ard::negotiation
