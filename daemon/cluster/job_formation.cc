#include "daemon/cluster/job_formation.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/logging.h"
#include "daemon/dataplane/tcp/data_auth.h"
#include "daemon/negotiation/elastic_settle.h"
#include "daemon/negotiation/rank_assignment.h"

namespace ard::cluster {

using negotiation::kElasticSettle;
using negotiation::kElasticSettleNoneBack;

namespace {
// Bounds on what a peer may ask for: a job of more ranks, or a formation wait longer than this,
// is a bug or an attack, not a training job.
constexpr int kMaxJobSize = 1 << 20;
constexpr uint32_t kMaxFormTimeoutMs = 3600 * 1000;
constexpr size_t kMaxNameBytes = 256;
}  // namespace

struct JobFormation::Forming {
  int size = 0;            // elastic: max_np (0: none)
  int elastic_min_np = 0;  // 0: a fixed-size job
  absl::Time last_change;  // the last registration, or change of the running generation
  uint64_t token = 0;
  absl::Duration timeout;
  // By host name (sorted: host order defines cross ranks).
  std::map<std::string, std::pair<RegisterRanksRequest, Done<RegisterRanksResponse>>> hosts;
};

JobFormation::JobFormation(EventLoop& loop, uint64_t id_prefix,
                           std::function<void(const JobLayout&)> on_formed,
                           RunningHosts running_hosts)
    : loop_(loop),
      id_prefix_(id_prefix),
      on_formed_(std::move(on_formed)),
      running_hosts_(std::move(running_hosts)) {}

JobFormation::~JobFormation() = default;

void JobFormation::Register(const RegisterRanksRequest& request, Done<RegisterRanksResponse> done) {
  if (request.job().empty() || request.job().size() > kMaxNameBytes ||
      request.size() > kMaxJobSize || request.timeout_ms() > kMaxFormTimeoutMs) {
    done(absl::InvalidArgumentError(
        absl::StrCat("RegisterRanks from host ", request.host(), ": job name of ",
                     request.job().size(), " bytes (1 to ", kMaxNameBytes, "), size ",
                     request.size(), " (at most ", kMaxJobSize, ") or timeout_ms ",
                     request.timeout_ms(), " (at most ", kMaxFormTimeoutMs, ") out of range")));
    return;
  }
  // An elastic host may register more ranks than max_np: formation leaves the surplus out.
  const bool elastic = request.elastic_min_np() > 0;
  if (request.ranks_size() < 1 || request.ranks_size() > kMaxJobSize ||
      (!elastic && (request.size() < 1 || request.ranks_size() > request.size()))) {
    done(absl::InvalidArgumentError(absl::StrCat("job ", request.job(), ": host ", request.host(),
                                                 " registered ", request.ranks_size(),
                                                 " ranks for size ", request.size())));
    return;
  }
  if (absl::Status stale = CheckAmendment(request); !stale.ok()) return done(stale);
  auto& forming = forming_[request.job()];
  if (forming == nullptr) {
    forming = std::make_unique<Forming>();
    forming->size = request.size();
    forming->elastic_min_np = request.elastic_min_np();
    forming->token = next_token_++;
    forming->timeout = absl::Milliseconds(std::max<uint32_t>(request.timeout_ms(), 1000));
    loop_.PostAfter(forming->timeout, [this, name = request.job(), token = forming->token] {
      FormTimeout(name, token);
    });
  }
  if (forming->size != request.size() || (forming->elastic_min_np > 0) != elastic) {
    done(absl::InvalidArgumentError(absl::StrCat("job ", request.job(), " has size ", forming->size,
                                                 " on other hosts but ", request.size(), " on ",
                                                 request.host())));
    return;
  }
  auto& entry = forming->hosts[request.host()];
  if (entry.second) {
    // The host's job re-registered (a newer generation there): its earlier registration ends,
    // answered from the loop (the answer may register again).
    loop_.Post([superseded = std::move(entry.second),
                why = absl::AbortedError(absl::StrCat(
                    "job ", request.job(), ": host ", request.host(),
                    " registered again; this registration of ", entry.first.ranks_size(),
                    " rank(s) is superseded"))]() { superseded(why); });
  }
  entry = {request, std::move(done)};
  forming->last_change = absl::Now();
  Logger("negotiation")
      ->info("registration held job={} host={} ranks={} formation={} amendment={}", request.job(),
             request.host(), request.ranks_size(), request.formation(), request.amendment());
  if (elastic) ScheduleSettled(request.job());
  TryForm(request.job());
}

absl::Status JobFormation::CheckAmendment(const RegisterRanksRequest& request) const {
  if (request.formation() == 0) return absl::OkStatus();
  auto e = elastic_.find(request.job());
  if (e != elastic_.end()) {
    auto from = e->second.formed_from.find(request.host());
    if (from != e->second.formed_from.end() && from->second == request.formation()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "job ", request.job(), ": host ", request.host(), "'s formation ", request.formation(),
          " already formed (generation ", e->second.generation, ", answered); its amendment ",
          request.amendment(), " with ", request.ranks_size(), " rank(s) comes too late"));
    }
  }
  auto f = forming_.find(request.job());
  if (f == forming_.end()) return absl::OkStatus();
  auto held = f->second->hosts.find(request.host());
  if (held != f->second->hosts.end() && held->second.first.formation() == request.formation() &&
      held->second.first.amendment() > request.amendment()) {
    return absl::AbortedError(absl::StrCat("job ", request.job(), ": host ", request.host(),
                                           "'s amendment ", held->second.first.amendment(),
                                           " is held; this registration (amendment ",
                                           request.amendment(), ") is superseded"));
  }
  return absl::OkStatus();
}

void JobFormation::ScheduleSettled(const std::string& name) {
  for (absl::Duration settle : {kElasticSettle, kElasticSettleNoneBack}) {
    loop_.PostAfter(settle + absl::Milliseconds(1), [this, name] {
      if (forming_.count(name) != 0) TryForm(name);
    });
  }
}

void JobFormation::OnRunningChanged(const std::string& name) {
  auto it = forming_.find(name);
  if (it == forming_.end() || it->second->elastic_min_np == 0) return;
  it->second->last_change = absl::Now();
  ScheduleSettled(name);
  TryForm(name);
}

absl::StatusOr<JobLayout> JobFormation::Layout(const std::string& name, const Forming& f) {
  // Every host's ranks in host order, then local rank: the order ranks nobody gave follow.
  std::vector<const RegisterRanksRequest::LocalRank*> entries;
  for (const auto& [host, reg] : f.hosts) {
    const size_t first = entries.size();
    for (const auto& lr : reg.first.ranks()) entries.push_back(&lr);
    std::sort(entries.begin() + first, entries.end(),
              [](const auto* a, const auto* b) { return a->local_rank() < b->local_rank(); });
  }
  const bool elastic = f.elastic_min_np > 0;
  // Elastic: dense, in the ranks' own order, then host order and local rank; <= max_np.
  std::vector<negotiation::RankRequest> requests;
  for (size_t i = 0; i < entries.size(); ++i) {
    requests.push_back({entries[i]->rank(), static_cast<int64_t>(i)});
  }
  absl::StatusOr<std::vector<int>> assigned =
      negotiation::FormationRanks(requests, f.size, elastic);
  if (!assigned.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", name, ": ", assigned.status().message()));
  }
  const std::vector<int> ranks = *std::move(assigned);
  absl::StatusOr<std::string> secret = dataplane::tcp::NewJobSecret();
  if (!secret.ok()) return secret.status();
  JobLayout layout;
  layout.set_data_secret(*std::move(secret));
  layout.set_job_id((id_prefix_ << 24) | next_id_++);
  layout.set_generation(elastic ? ++elastic_[name].generation : 1);
  layout.set_job(name);
  layout.set_size(elastic ? static_cast<int>(std::count_if(ranks.begin(), ranks.end(),
                                                           [](int r) { return r >= 0; }))
                          : f.size);
  size_t next = 0;
  for (const auto& [host, reg] : f.hosts) {
    JobLayout::JobHost h;
    h.set_name(host);
    h.set_data_address(reg.first.data_address());
    for (int i = 0; i < reg.first.ranks_size(); ++i, ++next) {
      if (ranks[next] < 0) continue;  // left out (elastic: after max_np ranks)
      h.add_ranks(ranks[next]);
      h.add_pids(entries[next]->pid());
      h.add_registered_local_ranks(entries[next]->local_rank());
    }
    if (h.ranks_size() > 0) *layout.add_hosts() = std::move(h);
  }
  return layout;
}

void JobFormation::TryForm(const std::string& name) {
  auto it = forming_.find(name);
  const Forming& f = *it->second;
  int total = 0;
  for (const auto& [host, reg] : f.hosts) total += reg.first.ranks_size();
  if (f.elastic_min_np > 0 ? !ElasticReady(name, f, total) : total < f.size) return;
  absl::StatusOr<JobLayout> layout =
      f.elastic_min_np == 0 && total > f.size
          ? absl::InvalidArgumentError(absl::StrCat("job ", name, ": hosts registered ", total,
                                                    " ranks for a job of size ", f.size))
          : Layout(name, f);
  // Out of the map first: an answer may start another formation of the same name.
  std::unique_ptr<Forming> done = std::move(it->second);
  forming_.erase(it);
  std::set<std::string> in_layout;
  if (layout.ok()) {
    for (const auto& h : layout->hosts()) in_layout.insert(h.name());
    if (done->elastic_min_np > 0) {
      Elastic& e = elastic_[name];
      e.hosts = in_layout;
      e.bounds = {done->elastic_min_np, done->size};
      for (const auto& [host, reg] : done->hosts) e.formed_from[host] = reg.first.formation();
    } else {
      elastic_.erase(name);  // the name now runs a fixed-size job
    }
    on_formed_(*layout);
    Logger("negotiation")
        ->info("cross-host job formed job={} id={} size={} hosts={} generation={}", name,
               layout->job_id(), layout->size(), layout->hosts_size(), layout->generation());
  }
  RegisterRanksResponse response;
  if (layout.ok()) *response.mutable_layout() = *layout;
  for (auto& [host, reg] : done->hosts) {
    if (!layout.ok()) {
      reg.second(layout.status());
    } else if (in_layout.count(host) == 0) {  // elastic: every rank of it after max_np others
      reg.second(absl::ResourceExhaustedError(absl::StrCat(
          "elastic job ", name, " generation ", layout->generation(), " formed with ",
          layout->size(), " ranks, its max_np: the ", reg.first.ranks_size(), " rank(s) of host ",
          host,
          " come after them in rank order and are not in it; start them again once a rank "
          "has left")));
    } else {
      reg.second(response);
    }
  }
}

void JobFormation::FormTimeout(const std::string& name, uint64_t token) {
  auto it = forming_.find(name);
  if (it == forming_.end() || it->second->token != token) return;
  std::unique_ptr<Forming> f = std::move(it->second);
  forming_.erase(it);
  std::vector<std::string> who;
  int total = 0;
  for (const auto& [host, reg] : f->hosts) {
    who.push_back(absl::StrCat(host, " (", reg.first.ranks_size(), ")"));
    total += reg.first.ranks_size();
  }
  const absl::Status status =
      f->elastic_min_np > 0
          ? absl::DeadlineExceededError(absl::StrCat(
                "elastic job ", name, " did not form within ", FormatDurationShort(f->timeout),
                ": ", total, " rank(s) registered, fewer than min_np ", f->elastic_min_np,
                ", on hosts ", absl::StrJoin(who, ", ")))
          : absl::DeadlineExceededError(absl::StrCat(
                "job ", name, " did not form within ", FormatDurationShort(f->timeout), ": ", total,
                " of ", f->size, " ranks registered, on hosts ", absl::StrJoin(who, ", ")));
  for (auto& [host, reg] : f->hosts) reg.second(status);
}

bool JobFormation::ElasticReady(const std::string& name, const Forming& f, int total) const {
  if (total < f.elastic_min_np) return false;  // the registration's timeout fails it
  // A generation still runs: each of its hosts that has not left it will come (its ranks were
  // told that hosts wait, or it fails the generation first). Forming without it would start a
  // second job of the same name.
  if (running_hosts_) {
    for (const std::string& host : running_hosts_(name)) {
      if (f.hosts.count(host) == 0) return false;
    }
  }
  auto previous = elastic_.find(name);
  bool all_back = false;  // every surviving host of the last generation is back
  bool any_back = false;
  if (previous != elastic_.end() && !previous->second.hosts.empty()) {
    all_back = true;
    for (const std::string& host : previous->second.hosts) {
      const bool back = f.hosts.count(host) != 0;
      all_back = all_back && back;
      any_back = any_back || back;
    }
  }
  const absl::Duration settle = any_back ? kElasticSettle : kElasticSettleNoneBack;
  return negotiation::ElasticSettled({total, f.size, all_back, f.last_change, settle}, absl::Now());
}

void JobFormation::OnHostDown(const std::string& host) {
  for (auto& [name, f] : forming_) f->hosts.erase(host);
  for (auto& [name, e] : elastic_) e.hosts.erase(host);
  std::vector<std::string> elastic;
  for (const auto& [name, f] : forming_) {
    if (f->elastic_min_np > 0) elastic.push_back(name);
  }
  for (const std::string& name : elastic) {
    if (forming_.count(name) != 0) TryForm(name);
  }
}

}  // namespace ard::cluster
