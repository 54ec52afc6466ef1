#include "ctl/status_format.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace ard::ctl {
namespace {

using Row = std::vector<std::string>;

}  // namespace

std::string RenderTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const Row& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const Row& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

namespace {

std::string GpuSummary(const Host& host) {
  if (host.gpus_size() == 0) return "0";
  // "2x NVIDIA H100 80GB HBM3" when all alike, else the count and the first model.
  bool same = std::all_of(host.gpus().begin(), host.gpus().end(),
                          [&](const GpuInfo& g) { return g.model() == host.gpus(0).model(); });
  return absl::StrCat(host.gpus_size(), "x ", host.gpus(0).model(), same ? "" : ", ...");
}

// One change of an elastic job, after its age and generation.
std::string ElasticChangeText(const JobSummary::ElasticChange& c) {
  if (c.change() == "hosts updated") {
    return absl::StrCat("hosts updated: ", c.size(), " rank(s) of host ",
                        absl::StrJoin(c.hosts(), ", "), " wait to join");
  }
  if (c.hosts().empty()) return absl::StrCat(c.change(), ": ", c.detail());  // lost, ended
  return absl::StrCat(c.change(), ": ", c.size(), " ranks on ", absl::StrJoin(c.hosts(), ", "),
                      c.detail().empty() ? "" : absl::StrCat(" (", c.detail(), ")"));
}

// An elastic job's generation, members and changes, under the jobs table.
std::string ElasticDetails(const JobSummary& j, const std::vector<std::string>& placement) {
  std::string out = absl::StrCat(
      "  elastic: job ", j.name(), " generation ", j.generation(), " (min_np ", j.elastic_min_np(),
      j.elastic_max_np() > 0 ? absl::StrCat(", max_np ", j.elastic_max_np()) : "", "): ", j.state(),
      ", ", j.size(), " ranks ", absl::StrJoin(placement, " "), "\n");
  for (const auto& c : j.elastic_changes()) {
    absl::StrAppend(&out, "    ", FormatDuration(c.age_s()), " ago  generation ", c.generation(),
                    " ", ElasticChangeText(c), "\n");
  }
  return out;
}

// The jobs table (placement, progress, stalls, GPU plans and elastic jobs' changes below it), or
// "  (none)".
std::string JobsTable(const google::protobuf::RepeatedPtrField<JobSummary>& jobs) {
  if (jobs.empty()) return "  (none)\n";
  std::vector<Row> rows = {{"JOB", "STATE", "RANKS", "RANKS PER HOST", "COLLECTIVES", "REDUCED",
                            "PENDING", "AGE", "NOTE"}};
  std::string details;
  for (const JobSummary& j : jobs) {
    std::vector<std::string> placement;
    for (const auto& hr : j.ranks()) {
      std::string devices;
      if (hr.gpu_devices_size() > 0) {  // GPU path: "a:[0,1] gpu[0,1]"
        devices = absl::StrCat(" gpu[", absl::StrJoin(hr.gpu_devices(), ","), "]");
      }
      placement.push_back(
          absl::StrCat(hr.host(), ":[", absl::StrJoin(hr.ranks(), ","), "]", devices));
    }
    std::string note = j.failure();
    if (j.state() == "forming") {
      note = absl::StrCat(j.registered_ranks(), " of ", j.size(), " ranks registered");
    } else if (note.empty() && j.stalled_size() > 0) {
      note = absl::StrCat(j.stalled_size(), " stalled tensor(s)");
    }
    rows.push_back({j.name(), j.state(), absl::StrCat(j.size()), absl::StrJoin(placement, " "),
                    absl::StrCat(j.collectives_completed()), FormatBytes(j.bytes_reduced()),
                    absl::StrCat(j.pending_tensors()), FormatDuration(j.age_s()), note});
    if (!j.gpu_plan().empty())
      absl::StrAppend(&details, "  gpu: job ", j.name(), " ", j.gpu_plan(), "\n");
    if (j.elastic_min_np() > 0) absl::StrAppend(&details, ElasticDetails(j, placement));
    for (const auto& t : j.stalled()) {
      std::vector<std::string> missing;
      for (int i = 0; i < t.missing_ranks_size(); ++i) {
        missing.push_back(absl::StrFormat(
            "%d (last active %s ago)", t.missing_ranks(i),
            FormatDuration(i < t.missing_last_activity_s_size() ? t.missing_last_activity_s(i)
                                                                : 0)));
      }
      absl::StrAppend(&details, "  stalled: job ", j.name(), " tensor ", t.name(), " waiting ",
                      FormatDuration(t.waiting_s()), "; missing ranks ",
                      absl::StrJoin(missing, ", "), "\n");
    }
  }
  return absl::StrCat(RenderTable(rows), details);
}

// A follower that cannot reach its coordinator: why, then what the follower itself knows.
std::string LocalViewTable(const GetClusterStatusResponse& status) {
  const LocalView& l = status.local();
  std::string out = absl::StrCat("Cluster view unavailable: ", status.cluster_view_error(), "\n");
  if (!status.has_local()) return out;
  absl::StrAppend(&out, "\nLocal view of host ", l.host(), " (", l.address(), ", ", l.role(),
                  "):\n");
  std::string membership = l.membership();
  if (l.membership() == "joining") {
    absl::StrAppend(&membership, " (not a cluster member; ", l.join_attempts(),
                    " join attempt(s) so far)");
  } else if (l.membership() == "cut_off") {
    absl::StrAppend(&membership,
                    " (the coordinator stopped answering; the cluster marks this "
                    "host DOWN)");
  }
  const std::vector<Row> rows = {
      {"  coordinator", l.coordinator_address()},
      {"  membership", membership},
      {"  incarnation", l.incarnation() == 0 ? "- (never joined)" : absl::StrCat(l.incarnation())},
      {"  last contact",
       l.last_contact_age_s() < 0 ? "never" : FormatDuration(l.last_contact_age_s()) + " ago"},
      {"  last error", l.last_error().empty() ? "-" : l.last_error()},
      {"  version", absl::StrCat(l.version(), " (pid ", l.pid(), ")")},
  };
  absl::StrAppend(&out, RenderTable(rows), "\nJobs on host ", l.host(), ":\n", JobsTable(l.jobs()));
  return out;
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string FormatDuration(double seconds) {
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  int64_t s = static_cast<int64_t>(seconds);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

// Coordinator failover: the answering daemon's view of the election and the changes it saw.
std::string CoordinationText(const GetClusterStatusResponse& status) {
  if (!status.has_coordination()) return "";
  const CoordinationView& c = status.coordination();
  std::string out = absl::StrFormat(
      "\nCoordination: %s (%s), term %d, coordinator %s%s, %s is %s, etcd %s\n", c.mode(),
      absl::StrJoin(c.endpoints(), ","), c.term(), c.coordinator().empty() ? "none" : c.coordinator(),
      c.coordinator_address().empty() ? "" : absl::StrCat(" (", c.coordinator_address(), ")"),
      status.answered_by(), c.role(), c.etcd_state());
  if (c.history_size() == 0) return out;
  std::vector<Row> rows = {{"TIME", "TERM", "COORDINATOR", "ADDRESS", "WHY"}};
  for (const CoordinatorChange& change : c.history()) {
    rows.push_back({absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(change.time_unix_ms()),
                                     absl::UTCTimeZone()),
                     absl::StrCat(change.term()), change.host().empty() ? "none" : change.host(),
                     change.address().empty() ? "-" : change.address(), change.reason()});
  }
  absl::StrAppend(&out, "Coordinator changes seen by ", status.answered_by(), ":\n",
                  RenderTable(rows));
  return out;
}

std::string FormatStatusTable(const GetClusterStatusResponse& status) {
  if (!status.cluster_view_error().empty()) {
    return absl::StrCat(LocalViewTable(status), CoordinationText(status));
  }
  const ClusterView& view = status.view();
  int up = 0;
  for (const Host& h : view.hosts()) up += h.state() == UP;
  std::string out = absl::StrFormat(
      "Cluster: coordinator %s (%s), membership epoch %d, %d of %d hosts UP%s\n\n",
      view.coordinator(), view.coordinator_address(), view.membership_epoch(), up,
      view.hosts_size(),
      status.forwarded() ? absl::StrCat(" (via ", status.answered_by(), ")") : "");
  std::vector<Row> rows = {{"HOST", "ADDRESS", "STATE", "INC", "UPTIME", "LAST-HB", "GPUS",
                            "NCCL", "DATA-PLANE", "VERSION", "NOTE"}};
  for (const Host& h : view.hosts()) {
    std::string note = h.coordinator() ? "coordinator" : "";
    if (h.state() == DOWN) note = h.down_reason();
    rows.push_back({h.name(), h.address(), HostState_Name(h.state()), absl::StrCat(h.incarnation()),
                    h.state() == UP ? FormatDuration(h.uptime_s()) : "-",
                    FormatDuration(h.last_heartbeat_age_s()) + " ago", GpuSummary(h),
                    h.nccl_version().empty() ? "-" : h.nccl_version(),
                    h.data_plane_security().empty() ? "-" : h.data_plane_security(), h.version(),
                    note});
  }
  absl::StrAppend(&out, RenderTable(rows));
  // GPU details: model, memory and PCI bus of every GPU, with the host's NCCL/CUDA versions.
  std::string gpus;
  for (const Host& h : view.hosts()) {
    for (const GpuInfo& g : h.gpus()) {
      absl::StrAppend(&gpus, "  ", h.name(), " gpu ", g.index(), ": ", g.model(), ", ",
                      FormatBytes(g.memory_bytes()), g.pci_bus_id().empty() ? "" : ", ",
                      g.pci_bus_id(), " (NCCL ", h.nccl_version().empty() ? "-" : h.nccl_version(),
                      ", CUDA ", h.cuda_runtime_version().empty() ? "-" : h.cuda_runtime_version(),
                      ")\n");
    }
  }
  if (!gpus.empty()) absl::StrAppend(&out, "\nGPUs:\n", gpus);
  absl::StrAppend(&out, "\nJobs:\n", JobsTable(view.jobs()));
  absl::StrAppend(&out, CoordinationText(status));
  return out;
}

absl::StatusOr<std::string> FormatStatusJson(const GetClusterStatusResponse& status) {
  namespace pb = google::protobuf;
  pb::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;  // empty `jobs` prints as []
  std::string view_json;
  if (auto s = pb::util::MessageToJsonString(status.view(), &view_json, print); !s.ok()) {
    return absl::InternalError(std::string(s.message()));
  }
  // The view's fields at the top level (in schema order), then who answered, why there is no
  // cluster view ("" when there is one) and, from a follower, its local view.
  pb::Value answered_by;
  answered_by.set_string_value(status.answered_by());
  pb::Value view_error;
  view_error.set_string_value(status.cluster_view_error());
  std::string answered_by_json, view_error_json, local_json, coordination_json;
  if (status.has_coordination()) {
    if (auto s = pb::util::MessageToJsonString(status.coordination(), &coordination_json, print);
        !s.ok()) {
      return absl::InternalError(std::string(s.message()));
    }
  }
  for (auto [value, json] :
       {std::pair{&answered_by, &answered_by_json}, std::pair{&view_error, &view_error_json}}) {
    if (auto s = pb::util::MessageToJsonString(*value, json); !s.ok()) {
      return absl::InternalError(std::string(s.message()));
    }
  }
  if (status.has_local()) {
    if (auto s = pb::util::MessageToJsonString(status.local(), &local_json, print); !s.ok()) {
      return absl::InternalError(std::string(s.message()));
    }
  }
  if (view_json.size() < 2 || view_json.front() != '{' || view_json.back() != '}') {
    return absl::InternalError("unexpected JSON for the cluster view");
  }
  view_json.pop_back();
  return absl::StrCat(view_json, ",\"answered_by\":", answered_by_json,
                      ",\"forwarded\":", status.forwarded() ? "true" : "false",
                      ",\"cluster_view_error\":", view_error_json,
                      local_json.empty() ? "" : ",\"local\":", local_json,
                      coordination_json.empty() ? "" : ",\"coordination\":", coordination_json,
                      "}");
}

}  // namespace ard::ctl
