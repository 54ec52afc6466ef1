#include "daemon/config/config_reload.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/config/config_loader.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace ard::config {
namespace {

// The --config file among the daemon's arguments (the last one wins, as in LoadConfig).
std::string ConfigFile(const std::vector<std::string>& args) {
  std::string file;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--config=", 0) == 0) file = args[i].substr(9);
    if (args[i] == "--config" && i + 1 < args.size()) file = args[i + 1];
  }
  return file;
}

}  // namespace

ReloadPlan PlanReload(const DaemonConfig& running, const DaemonConfig& reloaded) {
  ReloadPlan plan;
  plan.next = running;
  const auto* desc = DaemonConfig::descriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = desc->field(i);
    std::string before, after;
    google::protobuf::TextFormat::PrintFieldValueToString(running, field, -1, &before);
    google::protobuf::TextFormat::PrintFieldValueToString(reloaded, field, -1, &after);
    if (before == after) continue;
    std::string change = absl::StrCat(field->name(), " ", before, " -> ", after);
    // log_level is the one field a running daemon applies; the rest are fixed at startup.
    if (field->number() == DaemonConfig::kLogLevelFieldNumber) {
      plan.next.set_log_level(reloaded.log_level());
      plan.applied.push_back(std::move(change));
    } else {
      plan.need_restart.push_back(std::move(change));
    }
  }
  return plan;
}

absl::StatusOr<ReloadPlan> Reload(const std::vector<std::string>& args,
                                  const DaemonConfig& running) {
  bool help = false;
  absl::StatusOr<DaemonConfig> reloaded = LoadConfig(args, &help);
  if (!reloaded.ok()) return reloaded.status();
  return PlanReload(running, *reloaded);
}

std::string DescribeReload(const std::vector<std::string>& args, const ReloadPlan& plan) {
  const std::string file = ConfigFile(args);
  std::string out = absl::StrCat("file=", file.empty() ? "none" : file);
  if (plan.applied.empty() && plan.need_restart.empty()) {
    return absl::StrCat(out, " nothing changed");
  }
  absl::StrAppend(&out, " applied=[", absl::StrJoin(plan.applied, ", "), "]");
  if (!plan.need_restart.empty()) {
    absl::StrAppend(&out, " needs_restart=[", absl::StrJoin(plan.need_restart, ", "),
                    "] (restart the daemon to apply these)");
  }
  return out;
}

}  // namespace ard::config
