#include "daemon/config/config_loader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "daemon/common/host_name.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/version.h"
#include "daemon/config/flag_docs.h"
#include "daemon/dataplane/tcp/algorithms.h"
#include "daemon/negotiation/fusion_planner.h"
#include "daemon/negotiation/steady_defaults.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace ard::config {
namespace {

using google::protobuf::FieldDescriptor;

constexpr size_t kMaxUnixPath = 107;  // sizeof(sockaddr_un::sun_path) - 1

// Collects the first text-format parse error as "FILE:LINE:COL: message".
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstErrorCollector(std::string file) : file_(std::move(file)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty())
      error_ = absl::StrFormat("%s:%d:%d: %s", file_, line + 1, column + 1, message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string file_;
  std::string error_;
};

// DaemonConfig's schema with explicit presence on every field (a proto2 copy), so that the text
// parser's own check for a field given twice sees it even when the first value is the proto3
// default ("stall_shutdown_ms: 0" and later "stall_shutdown_ms: 600000"). Built once; immutable.
const google::protobuf::Message& PresenceChecked() {
  static const google::protobuf::Message* prototype = [] {
    google::protobuf::FileDescriptorProto file;
    DaemonConfig::descriptor()->file()->CopyTo(&file);
    file.set_syntax("proto2");
    auto* pool = new google::protobuf::DescriptorPool();
    const google::protobuf::FileDescriptor* built = pool->BuildFile(file);
    ARD_CHECK(built != nullptr);
    auto* factory = new google::protobuf::DynamicMessageFactory(pool);
    return factory->GetPrototype(built->FindMessageTypeByName(DaemonConfig::descriptor()->name()));
  }();
  return *prototype;
}

absl::Status ParseFile(const std::string& path, DaemonConfig* config) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is a directory"));
  }
  errno = 0;
  std::ifstream in(path);
  if (!in) {
    const std::string why = errno != 0 ? std::strerror(errno) : "cannot open";
    return absl::NotFoundError(absl::StrCat("cannot read config file ", path, ": ", why));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read config file ", path, ": ", std::strerror(errno)));
  }
  FirstErrorCollector errors(path);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  // Parse (which, unlike Merge, refuses a non-repeated field given twice) into the copy with
  // presence; then Merge the checked text so that the file's values replace the defaults.
  std::unique_ptr<google::protobuf::Message> checked(PresenceChecked().New());
  if (!parser.ParseFromString(text.str(), checked.get()) ||
      !parser.MergeFromString(text.str(), config)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed config ", errors.error()));
  }
  return absl::OkStatus();
}

absl::Status SetField(const std::string& name, const std::string& value, DaemonConfig* config) {
  const FieldDescriptor* field = DaemonConfig::descriptor()->FindFieldByName(name);
  if (field == nullptr || field->is_repeated()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
  }
  const auto* reflection = config->GetReflection();
  auto bad = [&](const char* what) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", name, ": '", value, "' is not ", what));
  };
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      reflection->SetString(config, field, value);
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(value, &v)) return bad("an unsigned 32-bit integer");
      reflection->SetUInt32(config, field, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(value, &v)) return bad("a 32-bit integer");
      reflection->SetInt32(config, field, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(value, &v)) return bad("an unsigned 64-bit integer");
      reflection->SetUInt64(config, field, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (!absl::SimpleAtob(value, &v)) return bad("a boolean");
      reflection->SetBool(config, field, v);
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(absl::StrCat("flag --", name, " has an unsupported type"));
  }
}

// Coordinator failover (`coordination`): etcd endpoints and lease timing.
absl::Status CheckCoordination(const DaemonConfig& c) {
  constexpr absl::string_view kScheme = "etcd://";
  if (!c.coordinator().empty()) {
    return absl::InvalidArgumentError(
        "coordinator and coordination are exclusive: with coordination the coordinator is "
        "elected");
  }
  if (!absl::StartsWith(c.coordination(), kScheme) || c.coordination().size() == kScheme.size()) {
    return absl::InvalidArgumentError(absl::StrCat("coordination: '", c.coordination(),
                                                   "' is not etcd://HOST:PORT[,HOST:PORT...]"));
  }
  for (absl::string_view endpoint : absl::StrSplit(c.coordination().substr(kScheme.size()), ',')) {
    std::string host;
    int port;
    if (auto s = SplitHostPort(std::string(endpoint), &host, &port); !s.ok() || port == 0) {
      return absl::InvalidArgumentError(absl::StrCat("coordination: etcd endpoint '", endpoint,
                                                     "' is not HOST:PORT with a port"));
    }
  }
  if (c.coordination_ttl_ms() < 2000) {
    return absl::InvalidArgumentError("coordination_ttl_ms must be at least 2000 (etcd's minimum)");
  }
  if (c.coordination_poll_ms() == 0 || c.coordination_poll_ms() * 2 > c.coordination_ttl_ms()) {
    return absl::InvalidArgumentError(
        "coordination_poll_ms must be > 0 and at most half of coordination_ttl_ms");
  }
  if (c.coordination_prefix().empty() || c.coordination_prefix()[0] != '/') {
    return absl::InvalidArgumentError("coordination_prefix must start with '/'");
  }
  return absl::OkStatus();
}

}  // namespace

DaemonConfig Defaults() {
  DaemonConfig c;
  c.set_cluster_address("0.0.0.0:7070");
  c.set_local_socket("/run/allreduced/allreduced.sock");
  c.set_heartbeat_ms(1000);
  c.set_coordination_ttl_ms(3000);
  c.set_coordination_poll_ms(500);
  c.set_coordination_prefix("/allreduced/default");
  c.set_host_timeout_ms(5000);
  c.set_log_level("info");
  c.set_rpc_timeout_ms(2000);
  c.set_join_backoff_initial_ms(100);
  c.set_join_backoff_max_ms(5000);
  c.set_job_form_timeout_ms(60000);
  c.set_stall_warning_ms(60000);
  c.set_stall_shutdown_ms(0);
  c.set_max_input_arena_bytes(16ull << 30);
  c.set_result_segment_bytes(64ull << 20);
  c.set_max_result_arena_bytes(8ull << 30);
  c.set_fusion_threshold_bytes(negotiation::kFusionThresholdBytesDefault);
  c.set_cache_capacity(1024);
  c.set_cycle_time_ms(0);
  c.set_steady_state(negotiation::kSteadyStateDefault);
  c.set_steady_round_data_max_bytes(negotiation::kSteadyRoundDataMaxBytesDefault);
  c.set_steady_round_partial_wait_us(negotiation::kSteadyRoundPartialWaitUsDefault);
  c.set_cross_host_algorithm("auto");
  c.set_cross_host_ring_threshold_bytes(dataplane::tcp::kRingThresholdBytesDefault);
  c.set_cross_host_chunk_bytes(dataplane::tcp::kChunkBytesDefault);
  c.set_max_clients(4096);
  c.set_max_jobs(1024);
  c.set_max_pending_tensors(65536);
  c.set_hello_timeout_ms(10000);
  c.set_peer_policy("same_user");
  c.set_max_client_outbox_bytes(64ull << 20);
  c.set_gpu_mode("auto");
  c.set_gpu_fusion_buffer_bytes(64ull << 20);
  c.set_gpu_comm_init_timeout_ms(60000);
  c.set_max_gpu_event_pool(1024);
  c.set_metrics_job_retention_s(3600);
  return c;
}

absl::StatusOr<DaemonConfig> LoadConfig(const std::vector<std::string>& args, bool* help) {
  *help = false;
  // Pass 1: split into (name, value) pairs; --name=value, --name value, or a bare boolean --name.
  std::vector<std::pair<std::string, std::string>> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      return DaemonConfig();
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (see --help)"));
    }
    std::string body = arg.substr(2);
    size_t eq = body.find('=');
    if (eq != std::string::npos) {
      flags.emplace_back(body.substr(0, eq), body.substr(eq + 1));
      continue;
    }
    const FieldDescriptor* field = DaemonConfig::descriptor()->FindFieldByName(body);
    if (body != "config" && field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", body, " (see --help)"));
    }
    if (field != nullptr && field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
      flags.emplace_back(body, "true");
    } else if (i + 1 < args.size()) {
      flags.emplace_back(body, args[++i]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", body, " needs a value"));
    }
  }
  // Pass 2: defaults < Horovod's environment knobs < file < flags.
  DaemonConfig config = Defaults();
  // Horovod's knobs, honoured when set in the daemon's environment (the file and flags win).
  for (const auto& [env, field] :
       {std::pair<const char*, const char*>{"HOROVOD_FUSION_THRESHOLD", "fusion_threshold_bytes"},
        {"HOROVOD_CACHE_CAPACITY", "cache_capacity"},
        {"HOROVOD_CYCLE_TIME", "cycle_time_ms"}}) {
    const char* value = std::getenv(env);
    if (value == nullptr || *value == '\0') continue;
    std::string v = value;
    if (std::string(env) == "HOROVOD_CYCLE_TIME") {
      double ms;  // Horovod allows fractional milliseconds
      if (!absl::SimpleAtod(v, &ms) || ms < 0) {
        return absl::InvalidArgumentError(absl::StrCat(env, "='", v, "' is not milliseconds"));
      }
      v = std::to_string(static_cast<uint32_t>(ms));
    }
    if (auto s = SetField(field, v, &config); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(env, ": ", s.message()));
    }
  }
  for (const auto& [name, value] : flags) {
    if (name == "config") ARD_RETURN_IF_ERROR(ParseFile(value, &config));
  }
  for (const auto& [name, value] : flags) {
    if (name != "config") ARD_RETURN_IF_ERROR(SetField(name, value, &config));
  }
  ARD_RETURN_IF_ERROR(ValidateAndComplete(&config));
  return config;
}

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not HOST:PORT"));
  }
  std::string h = address.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']' || h.size() < 3) {
      return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not [V6ADDR]:PORT"));
    }
  } else if (h.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "': write IPv6 addresses as [ADDR]:PORT"));
  }
  int p;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' has no valid port (0-65535)"));
  }
  *host = h;
  *port = p;
  return absl::OkStatus();
}

absl::Status ValidateAndComplete(DaemonConfig* c) {
  std::string host;
  int port;
  auto field_error = [](const char* field, const absl::Status& s) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
  };
  if (auto s = SplitHostPort(c->cluster_address(), &host, &port); !s.ok()) {
    return field_error("cluster_address", s);
  }
  if (!c->coordinator().empty()) {
    if (auto s = SplitHostPort(c->coordinator(), &host, &port); !s.ok()) {
      return field_error("coordinator", s);
    }
    if (port == 0) return absl::InvalidArgumentError("coordinator: port 0 cannot be dialed");
  }
  if (!c->coordination().empty()) {
    if (auto s = CheckCoordination(*c); !s.ok()) return s;
  }
  if (!c->advertise_address().empty()) {
    if (auto s = SplitHostPort(c->advertise_address(), &host, &port); !s.ok()) {
      return field_error("advertise_address", s);
    }
  }
  if (!c->data_address().empty()) {
    if (auto s = SplitHostPort(c->data_address(), &host, &port); !s.ok()) {
      return field_error("data_address", s);
    }
  }
  if (!c->metrics_address().empty()) {
    if (auto s = SplitHostPort(c->metrics_address(), &host, &port); !s.ok()) {
      return field_error("metrics_address", s);
    }
  }
  if (c->local_socket().empty() || c->local_socket().size() > kMaxUnixPath) {
    return absl::InvalidArgumentError(absl::StrCat("local_socket: path must be 1-", kMaxUnixPath,
                                                   " bytes, got ", c->local_socket().size()));
  }
  if (c->heartbeat_ms() == 0) return absl::InvalidArgumentError("heartbeat_ms must be > 0");
  if (c->gpu_mode().empty()) c->set_gpu_mode("auto");
  if (c->gpu_mode() != "auto" && c->gpu_mode() != "nccl" && c->gpu_mode() != "hierarchical") {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_mode: '", c->gpu_mode(), "' is not one of auto, nccl, hierarchical"));
  }
  if (c->cross_host_algorithm().empty()) c->set_cross_host_algorithm("auto");
  if (c->cross_host_algorithm() != "auto" && c->cross_host_algorithm() != "ring" &&
      c->cross_host_algorithm() != "recursive_doubling") {
    return absl::InvalidArgumentError(
        absl::StrCat("cross_host_algorithm: '", c->cross_host_algorithm(),
                     "' is not one of auto, ring, recursive_doubling"));
  }
  if (c->cross_host_chunk_bytes() == 0) {
    return absl::InvalidArgumentError("cross_host_chunk_bytes must be > 0");
  }
  if (c->host_timeout_ms() < 2 * c->heartbeat_ms()) {
    return absl::InvalidArgumentError(absl::StrCat("host_timeout_ms (", c->host_timeout_ms(),
                                                   ") must be at least twice ", "heartbeat_ms (",
                                                   c->heartbeat_ms(), ")"));
  }
  if (c->rpc_timeout_ms() == 0) return absl::InvalidArgumentError("rpc_timeout_ms must be > 0");
  if (c->join_backoff_initial_ms() == 0 ||
      c->join_backoff_initial_ms() > c->join_backoff_max_ms()) {
    return absl::InvalidArgumentError(
        "join_backoff_initial_ms must be > 0 and <= join_backoff_max_ms");
  }
  if (c->job_form_timeout_ms() == 0 || c->stall_warning_ms() == 0) {
    return absl::InvalidArgumentError("job_form_timeout_ms and stall_warning_ms must be > 0");
  }
  if (c->stall_shutdown_ms() != 0 && c->stall_shutdown_ms() < c->stall_warning_ms()) {
    return absl::InvalidArgumentError(
        "stall_shutdown_ms must be 0 (off) or at least stall_warning_ms");
  }
  if (c->result_segment_bytes() < (1 << 20) ||
      c->result_segment_bytes() > c->max_result_arena_bytes()) {
    return absl::InvalidArgumentError(
        "result_segment_bytes must be >= 1 MiB and <= max_result_arena_bytes");
  }
  if (c->max_input_arena_bytes() < (1 << 20)) {
    return absl::InvalidArgumentError("max_input_arena_bytes must be >= 1 MiB");
  }
  if (c->max_clients() == 0 || c->max_jobs() == 0 || c->max_pending_tensors() == 0 ||
      c->hello_timeout_ms() == 0) {
    return absl::InvalidArgumentError(
        "max_clients, max_jobs, max_pending_tensors and hello_timeout_ms must be > 0");
  }
  if (c->peer_policy() != "same_user" && c->peer_policy() != "group" && c->peer_policy() != "any") {
    return absl::InvalidArgumentError(
        absl::StrCat("peer_policy '", c->peer_policy(), "' must be same_user, group or any"));
  }
  if (c->max_client_outbox_bytes() < (64 << 10)) {
    return absl::InvalidArgumentError("max_client_outbox_bytes must be >= 64 KiB");
  }
  if (c->data_plane_tls() &&
      (c->tls_cert_file().empty() || c->tls_key_file().empty() || c->tls_ca_file().empty())) {
    return absl::InvalidArgumentError(
        "data_plane_tls needs tls_cert_file, tls_key_file and tls_ca_file (the data plane "
        "encrypts with the daemon's gRPC certificates)");
  }
  spdlog::level::level_enum level;
  if (auto s = ParseLogLevel(c->log_level(), &level); !s.ok()) return field_error("log_level", s);
  if (c->host_name().empty()) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
      return absl::InvalidArgumentError("host_name is empty and gethostname() failed");
    }
    c->set_host_name(name);
  }
  if (!ValidHostName(c->host_name())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host_name '", c->host_name(), "' must be 1-64 of letters, digits, '-', '_' and '.'"));
  }
  return absl::OkStatus();
}

std::string Usage() {
  const DaemonConfig defaults = Defaults();
  std::string out = absl::StrCat(
      "usage: allreduced [--config=FILE] [--<field>=<value> ...]\n"
      "       allreduced --version | --help\n\n"
      "allreduced ",
      kVersion,
      ": the per-host all-reduce daemon. The config file is protobuf text format\n"
      "(proto/config.proto, where each field is documented in full); flags override it.\n\n"
      "flags:\n"
      "  --config=FILE\n      The config file (default: none; built-in defaults and flags only)\n");
  const auto* desc = DaemonConfig::descriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    const FieldDescriptor* f = desc->field(i);
    std::string def;
    google::protobuf::TextFormat::PrintFieldValueToString(defaults, f, -1, &def);
    const char* doc = "";
    for (const FlagDoc& d : kFlagDocs) {
      if (f->name() == d.name) doc = d.text;
    }
    absl::StrAppend(&out, "  --", f->name(), "=", f->type_name(), "  (default ", def, ")\n      ",
                    doc, "\n");
  }
  return out;
}

}  // namespace ard::config
