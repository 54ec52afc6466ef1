#include "ctl/timeline_trace.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ctl/json_text.h"

namespace ard::ctl {
namespace {

// timeline::Mark values (daemon/timeline/recorder.h; the CLI does not link the daemon).
enum : uint32_t {
  kSubmit = 1,
  kReady = 2,
  kCommit = 3,
  kExecStart = 4,
  kTransferStart = 5,
  kTransferEnd = 6,
  kComplete = 7,
  kCarried = 8
};
constexpr int64_t kNone = std::numeric_limits<int64_t>::min();

struct Group {
  int64_t exec = kNone, transfer_start = kNone, transfer_end = kNone, complete = kNone;
  bool carried = false;  // its data crossed hosts in the round that agreed it
  std::vector<std::string> tensors;
};

// One submission of a tensor by this host's ranks: from their submits to its group's completion.
struct Instance {
  std::string tensor;
  int64_t ready = kNone;
  int64_t commit = kNone;
  uint64_t group = 0;
  std::vector<std::pair<int, int64_t>> submits;  // (rank, time)
  std::vector<std::pair<int, int64_t>> others;   // the other hosts' ranks' submits (matched)
  std::string last_host;                         // the host whose ranks were ready last
};

struct HostMarks {
  std::string name;
  std::map<std::pair<int, std::string>, std::vector<int64_t>> submits;
  std::map<std::string, std::vector<int64_t>> readies;
  std::map<std::string, std::vector<std::pair<int64_t, uint64_t>>> commits;
  std::map<uint64_t, Group> groups;
  std::vector<Instance> instances;
  std::map<std::string, std::vector<size_t>> by_tensor;  // instances, by commit time
};

HostMarks Collect(const StopTimelineResponse& host) {
  HostMarks h;
  h.name = host.host();
  const int64_t offset = host.clock_offset_us();
  for (const TimelineEvent& e : host.events()) {
    const int64_t t = e.time_us() + offset;
    switch (e.mark()) {
      case kSubmit:
        h.submits[{e.rank(), e.tensor()}].push_back(t);
        break;
      case kReady:
        h.readies[e.tensor()].push_back(t);
        break;
      case kCommit:
        h.commits[e.tensor()].push_back({t, e.group()});
        h.groups[e.group()].tensors.push_back(e.tensor());
        break;
      case kExecStart:
        h.groups[e.group()].exec = t;
        break;
      case kTransferStart:
        h.groups[e.group()].transfer_start = t;
        break;
      case kTransferEnd:
        h.groups[e.group()].transfer_end = t;
        break;
      case kComplete:
        h.groups[e.group()].complete = t;
        break;
      case kCarried:
        h.groups[e.group()].carried = true;
        break;
      default:
        break;
    }
  }
  for (auto& [key, v] : h.submits) std::sort(v.begin(), v.end());
  for (auto& [key, v] : h.readies) std::sort(v.begin(), v.end());
  for (auto& [key, v] : h.commits) std::sort(v.begin(), v.end());
  // Each submit belongs to the first "ready" of its tensor at or after it, and that to the first
  // commit of the tensor at or after it.
  std::map<std::pair<std::string, size_t>, size_t> instance_of;  // (tensor, ready index)
  for (const auto& [key, times] : h.submits) {
    const auto& [rank, tensor] = key;
    const std::vector<int64_t>& ready = h.readies[tensor];
    for (int64_t s : times) {
      const size_t r = std::lower_bound(ready.begin(), ready.end(), s) - ready.begin();
      if (r == ready.size()) continue;  // not ready when the recording ended
      auto [it, made] = instance_of.try_emplace({tensor, r}, h.instances.size());
      if (made) {
        Instance in;
        in.tensor = tensor;
        in.ready = ready[r];
        const auto& commits = h.commits[tensor];
        auto c =
            std::lower_bound(commits.begin(), commits.end(), std::make_pair(in.ready, uint64_t{0}));
        if (c != commits.end()) {
          in.commit = c->first;
          in.group = c->second;
        }
        h.instances.push_back(std::move(in));
      }
      h.instances[it->second].submits.push_back({rank, s});
    }
  }
  for (size_t i = 0; i < h.instances.size(); ++i) {
    if (h.instances[i].commit != kNone) h.by_tensor[h.instances[i].tensor].push_back(i);
  }
  for (auto& [tensor, v] : h.by_tensor) {
    std::sort(v.begin(), v.end(),
              [&](size_t a, size_t b) { return h.instances[a].commit < h.instances[b].commit; });
  }
  return h;
}

// The instance of `in` on host `other`: the same tensor, committed nearest in (aligned) time.
const Instance* Match(const Instance& in, const HostMarks& other) {
  auto it = other.by_tensor.find(in.tensor);
  if (it == other.by_tensor.end()) return nullptr;
  const Instance* best = nullptr;
  int64_t best_gap = 0;
  for (size_t i : it->second) {
    const Instance& o = other.instances[i];
    const int64_t gap = o.commit > in.commit ? o.commit - in.commit : in.commit - o.commit;
    if (best == nullptr || gap < best_gap) {
      best = &o;
      best_gap = gap;
    }
  }
  return best;
}

class Writer {
 public:
  explicit Writer(int64_t base) : base_(base) {}
  void Meta(int pid, int tid, const std::string& what, const std::string& arg) {
    Add(absl::StrCat("{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                     ",\"name\":", JsonString(what), ",\"args\":{", arg, "}}"));
  }
  // A slice [start, end]; skipped when either end is unknown.
  bool Slice(int pid, int tid, const std::string& name, int64_t start, int64_t end,
             const std::string& args) {
    if (start == kNone || end == kNone) return false;
    if (end < start) end = start;  // clock alignment error between hosts' marks
    Add(absl::StrCat("{\"ph\":\"X\",\"cat\":\"allreduced\",\"pid\":", pid, ",\"tid\":", tid,
                     ",\"name\":", JsonString(name), ",\"ts\":", start - base_,
                     ",\"dur\":", end - start, ",\"args\":{", args, "}}"));
    ++slices_;
    return true;
  }
  int slices() const { return slices_; }
  std::string Events() const { return absl::StrJoin(events_, ",\n"); }

 private:
  void Add(std::string e) { events_.push_back(std::move(e)); }
  const int64_t base_;
  std::vector<std::string> events_;
  int slices_ = 0;
};

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]");
}

}  // namespace

std::string WriteChromeTrace(const std::string& job,
                             const std::vector<StopTimelineResponse>& answers, TraceStats* stats) {
  std::vector<HostMarks> hosts;
  int64_t base = std::numeric_limits<int64_t>::max();
  for (const StopTimelineResponse& a : answers) {
    hosts.push_back(Collect(a));
    for (const TimelineEvent& e : a.events()) {
      base = std::min(base, e.time_us() + a.clock_offset_us());
    }
  }
  if (base == std::numeric_limits<int64_t>::max()) base = 0;
  // Who each host waited for: every rank's submit of the same tensor's instance, and the host
  // whose ranks were ready last.
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (Instance& in : hosts[h].instances) {
      if (in.commit == kNone) continue;
      int64_t latest = in.ready;
      for (size_t o = 0; o < hosts.size(); ++o) {
        if (o == h) continue;
        const Instance* m = Match(in, hosts[o]);
        if (m == nullptr) continue;
        for (const auto& s : m->submits) in.others.push_back(s);
        if (m->ready > latest) {
          latest = m->ready;
          in.last_host = hosts[o].name;
        }
      }
    }
  }
  Writer w(base);
  TraceStats st;
  for (size_t h = 0; h < hosts.size(); ++h) {
    const HostMarks& host = hosts[h];
    const int pid = static_cast<int>(h) + 1;
    w.Meta(pid, 0, "process_name", absl::StrCat("\"name\":", JsonString("host " + host.name)));
    w.Meta(pid, 0, "process_sort_index", absl::StrCat("\"sort_index\":", pid));
    w.Meta(pid, 0, "thread_name", "\"name\":\"fused groups\"");
    w.Meta(pid, 0, "thread_sort_index", "\"sort_index\":0");
    std::map<std::pair<int, std::string>, int> tids;  // rows: (rank, tensor), by rank then name
    for (const auto& [key, times] : host.submits) tids.emplace(key, 0);
    int next = 1;
    for (auto& [key, tid] : tids) {
      tid = next++;
      w.Meta(
          pid, tid, "thread_name",
          absl::StrCat("\"name\":", JsonString(absl::StrCat("rank ", key.first, " ", key.second))));
      w.Meta(pid, tid, "thread_sort_index", absl::StrCat("\"sort_index\":", tid));
    }
    for (const auto& [id, g] : host.groups) {
      if (w.Slice(pid, 0, absl::StrCat("group ", id, " (", g.tensors.size(), " tensors)"), g.exec,
                  g.complete,
                  absl::StrCat("\"group\":", id, ",\"tensors\":[",
                               absl::StrJoin(g.tensors, ",",
                                             [](std::string* out, const std::string& t) {
                                               out->append(JsonString(t));
                                             }),
                               "]"))) {
        ++st.groups;
      }
    }
    for (const Instance& in : host.instances) {
      auto g = host.groups.find(in.group);
      const Group* group = g == host.groups.end() ? nullptr : &g->second;
      const std::string common =
          absl::StrCat("\"tensor\":", JsonString(in.tensor), ",\"host\":", JsonString(host.name),
                       ",\"group\":", in.group,
                       ",\"group_size\":", group != nullptr ? group->tensors.size() : 0);
      for (const auto& [rank, submit] : in.submits) {
        const int tid = tids[{rank, in.tensor}];
        std::vector<int> later_here, later_elsewhere;
        for (const auto& [r, t] : in.submits) {
          if (t > submit) later_here.push_back(r);
        }
        for (const auto& [r, t] : in.others) {
          if (t > in.ready) later_elsewhere.push_back(r);
        }
        std::sort(later_here.begin(), later_here.end());
        std::sort(later_elsewhere.begin(), later_elsewhere.end());
        const std::string rank_arg = absl::StrCat(common, ",\"rank\":", rank);
        int n = 0;
        n += w.Slice(pid, tid, kPhaseWait, submit, in.ready,
                     absl::StrCat(rank_arg, ",\"waiting_for\":", RankList(later_here)));
        n += w.Slice(pid, tid, kPhaseNegotiate, in.ready, in.commit,
                     absl::StrCat(rank_arg, ",\"waiting_for\":", RankList(later_elsewhere),
                                  ",\"last_host\":", JsonString(in.last_host)));
        if (group != nullptr) {
          const bool cross = group->transfer_start != kNone;
          n += w.Slice(pid, tid, kPhaseQueued, in.commit, group->exec, rank_arg);
          if (group->carried) {
            // The round that agreed it moved its data: the executor only writes the results.
            n += w.Slice(pid, tid, kPhaseCopyOut, group->exec, group->complete,
                         absl::StrCat(rank_arg, ",\"carried_in_round\":true"));
          } else {
            n += w.Slice(pid, tid, kPhaseReduce, group->exec,
                         cross ? group->transfer_start : group->complete, rank_arg);
          }
          // One host: the reduce writes the results itself; its slice runs to completion.
          if (cross) {
            n += w.Slice(pid, tid, kPhaseTransfer, group->transfer_start, group->transfer_end,
                         rank_arg);
            n += w.Slice(pid, tid, kPhaseCopyOut, group->transfer_end, group->complete, rank_arg);
          }
          if (n == (cross ? 6 : 4)) ++st.instances;
        }
      }
    }
  }
  st.slices = w.slices();
  if (stats != nullptr) *stats = st;
  std::vector<std::string> host_info;
  for (const StopTimelineResponse& a : answers) {
    host_info.push_back(absl::StrCat(JsonString(a.host()),
                                     ":{\"clock_offset_us\":", a.clock_offset_us(),
                                     ",\"clock_offset_error_us\":", a.clock_offset_error_us(),
                                     ",\"dropped_marks\":", a.dropped(), "}"));
  }
  return absl::StrCat("{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"job\":", JsonString(job),
                      ",\"start_unix_us\":", base, ",\"hosts\":{", absl::StrJoin(host_info, ","),
                      "}},\n\"traceEvents\":[\n", w.Events(), "\n]}\n");
}

}  // namespace ard::ctl
