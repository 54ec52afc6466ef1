#include "daemon/config/config_loader.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "catch2/catch.hpp"

namespace ard::config {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

absl::StatusOr<DaemonConfig> Load(std::vector<std::string> args) {
  bool help = false;
  return LoadConfig(args, &help);
}

TEST_CASE("defaults are valid and fill the host name") {
  auto c = Load({});
  REQUIRE(c.ok());
  CHECK(c->cluster_address() == "0.0.0.0:7070");
  CHECK(c->local_socket() == "/run/allreduced/allreduced.sock");
  CHECK(c->heartbeat_ms() == 1000);
  CHECK(c->host_timeout_ms() == 5000);
  CHECK(!c->host_name().empty());
  CHECK(c->gpu_mode() == "auto");
  CHECK(c->gpu_fusion_buffer_bytes() == 64ull << 20);
  CHECK(c->cross_host_algorithm() == "auto");
  CHECK(c->cross_host_ring_threshold_bytes() == 64 << 10);
  CHECK(c->cross_host_chunk_bytes() == 4 << 20);
  CHECK(c->steady_state());
  CHECK(c->steady_round_data_max_bytes() == 1024);
  CHECK(c->steady_round_partial_wait_us() == 100);
}

TEST_CASE("the steady state is on by default; a file or a flag turns it off") {
  auto from_file = Load({"--config=" + WriteTemp("steady.conf", "steady_state: false\n")});
  REQUIRE(from_file.ok());
  CHECK_FALSE(from_file->steady_state());
  auto from_flag = Load({"--steady_state=false"});
  REQUIRE(from_flag.ok());
  CHECK_FALSE(from_flag->steady_state());
  auto no_data = Load({"--steady_round_data_max_bytes=0"});
  REQUIRE(no_data.ok());
  CHECK(no_data->steady_round_data_max_bytes() == 0);
  auto no_wait = Load({"--steady_round_partial_wait_us=0"});
  REQUIRE(no_wait.ok());
  CHECK(no_wait->steady_round_partial_wait_us() == 0);
}

TEST_CASE("cross-host algorithm flags set the data plane's selection") {
  auto c = Load({"--cross_host_algorithm=recursive_doubling",
                 "--cross_host_ring_threshold_bytes=1024", "--cross_host_chunk_bytes=65536"});
  REQUIRE(c.ok());
  CHECK(c->cross_host_algorithm() == "recursive_doubling");
  CHECK(c->cross_host_ring_threshold_bytes() == 1024);
  CHECK(c->cross_host_chunk_bytes() == 65536);
}

TEST_CASE("data_plane_tls needs the gRPC certificates") {
  auto c = Load({"--data_plane_tls=true"});
  REQUIRE(c.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(c.status().message()).find("tls_cert_file") != std::string::npos);
  c = Load({"--data_plane_tls=true", "--tls_cert_file=c.pem", "--tls_key_file=k.pem",
            "--tls_ca_file=ca.pem"});
  REQUIRE(c.ok());
  CHECK(c->data_plane_tls());
}

TEST_CASE("file overrides defaults and flags override the file") {
  std::string path = WriteTemp("good.conf",
                               "cluster_address: \"127.0.0.1:0\"\n"
                               "host_name: \"from-file\"\n"
                               "heartbeat_ms: 200\n"
                               "host_timeout_ms: 1000\n");
  auto c = Load({"--config=" + path, "--host_name", "from-flag", "--log_level=debug"});
  REQUIRE(c.ok());
  CHECK(c->cluster_address() == "127.0.0.1:0");
  CHECK(c->host_name() == "from-flag");
  CHECK(c->heartbeat_ms() == 200);
  CHECK(c->log_level() == "debug");
}

TEST_CASE("every field is a flag") {
  const auto* desc = DaemonConfig::descriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    std::string usage = Usage();
    CHECK(usage.find("--" + desc->field(i)->name() + "=") != std::string::npos);
  }
}

TEST_CASE("--help describes every flag in one line from proto/config.proto") {
  const std::string usage = Usage();
  const auto* desc = DaemonConfig::descriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    const std::string flag = "  --" + desc->field(i)->name() + "=";
    INFO(flag);
    const size_t at = usage.find(flag);
    REQUIRE(at != std::string::npos);
    // The flag's line, then its description: one indented, non-empty line.
    const size_t line_end = usage.find('\n', at);
    const size_t doc_end = usage.find('\n', line_end + 1);
    const std::string doc = usage.substr(line_end + 1, doc_end - line_end - 1);
    CHECK(doc.rfind("      ", 0) == 0);
    CHECK(doc.size() > 12);
    CHECK(doc.size() <= 6 + 200);
  }
  CHECK(usage.find("HOST:PORT of the coordinator daemon") != std::string::npos);
  CHECK(usage.find("--version") != std::string::npos);
}

TEST_CASE("Horovod's environment knobs set defaults that the file and flags override") {
  setenv("HOROVOD_FUSION_THRESHOLD", "1048576", 1);
  setenv("HOROVOD_CYCLE_TIME", "2.5", 1);
  setenv("HOROVOD_CACHE_CAPACITY", "64", 1);
  auto c = Load({"--cache_capacity=128"});
  unsetenv("HOROVOD_FUSION_THRESHOLD");
  unsetenv("HOROVOD_CYCLE_TIME");
  unsetenv("HOROVOD_CACHE_CAPACITY");
  REQUIRE(c.ok());
  CHECK(c->fusion_threshold_bytes() == 1048576);
  CHECK(c->cycle_time_ms() == 2);
  CHECK(c->cache_capacity() == 128);
  setenv("HOROVOD_FUSION_THRESHOLD", "lots", 1);
  auto bad = Load({});
  unsetenv("HOROVOD_FUSION_THRESHOLD");
  REQUIRE(!bad.ok());
  CHECK(std::string(bad.status().message()).find("HOROVOD_FUSION_THRESHOLD") != std::string::npos);
}

TEST_CASE("metrics are off by default; metrics_address must be HOST:PORT") {
  auto c = Load({});
  REQUIRE(c.ok());
  CHECK(c->metrics_address().empty());
  CHECK(c->metrics_job_retention_s() == 3600);
  CHECK(Load({"--metrics_address=127.0.0.1:9470"}).ok());
  auto bad = Load({"--metrics_address=nonsense"});
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("metrics_address") != std::string::npos);
}

TEST_CASE("--help is reported, not an error") {
  bool help = false;
  auto c = LoadConfig({"--help"}, &help);
  REQUIRE(c.ok());
  CHECK(help);
}

TEST_CASE("bad input gives one clear error") {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::string malformed = WriteTemp("bad.conf", "heartbeat_ms: 100\nnot_a_field: 3\n");
  std::string wrong_type = WriteTemp("bad2.conf", "heartbeat_ms: \"fast\"\n");
  std::string twice =
      WriteTemp("twice.conf", "host_name: \"a\"\nheartbeat_ms: 100\nhost_name: \"b\"\n");
  // The first value is the proto3 default, which a proto3 message cannot tell from "not set".
  std::string default_first = WriteTemp(
      "default_first.conf", "stall_shutdown_ms: 0\n# later...\nstall_shutdown_ms: 600000\n");
  const char* dir = std::getenv("TEST_TMPDIR");
  std::vector<Case> cases = {
      {{"--bogus=1"}, "unknown flag --bogus"},
      {{"--bogus"}, "unknown flag --bogus"},
      {{"stray"}, "unexpected argument 'stray'"},
      {{"--config=/nonexistent/x.conf"},
       "cannot read config file /nonexistent/x.conf: No such file or directory"},
      {{"--config=" + malformed}, "bad.conf:2:"},
      {{"--config=" + wrong_type}, "bad2.conf:1:"},
      {{"--config=" + twice}, "twice.conf:3:"},
      {{"--config=" + twice}, "\"host_name\" is specified multiple times"},
      {{"--config=" + default_first}, "default_first.conf:3:"},
      {{"--config=" + std::string(dir ? dir : "/tmp")}, " is a directory"},
      {{"--heartbeat_ms=soon"}, "--heartbeat_ms: 'soon' is not an unsigned"},
      {{"--heartbeat_ms=-5"}, "--heartbeat_ms: '-5' is not an unsigned"},
      {{"--heartbeat_ms=0"}, "heartbeat_ms must be > 0"},
      {{"--heartbeat_ms=1000", "--host_timeout_ms=1500"}, "must be at least twice"},
      {{"--cluster_address=nohostport"}, "cluster_address: 'nohostport' is not HOST:PORT"},
      {{"--cluster_address=127.0.0.1:70000"}, "no valid port"},
      {{"--coordinator=10.0.0.1:0"}, "port 0 cannot be dialed"},
      {{"--coordinator=::1:7070"}, "[ADDR]:PORT"},
      {{"--coordination=zk://h:1"}, "is not etcd://HOST:PORT[,HOST:PORT...]"},
      {{"--coordination=etcd://h:2379,nohostport"}, "etcd endpoint 'nohostport' is not"},
      {{"--coordination=etcd://h:2379", "--coordinator=h:7070"}, "are exclusive"},
      {{"--coordination=etcd://h:2379", "--coordination_ttl_ms=1000"}, "at least 2000"},
      {{"--coordination=etcd://h:2379", "--coordination_poll_ms=2000"}, "at most half"},
      {{"--coordination=etcd://h:2379", "--coordination_prefix=x"}, "must start with '/'"},
      {{"--local_socket="}, "local_socket: path must be"},
      {{"--local_socket=/" + std::string(200, 'x')}, "local_socket: path must be"},
      {{"--log_level=loud"}, "unknown log level 'loud'"},
      {{"--host_name=bad name"}, "must be 1-64 of letters"},
      {{"--host_name"}, "needs a value"},
      {{"--max_clients=0"}, "max_clients, max_jobs, max_pending_tensors and hello_timeout_ms"},
      {{"--max_pending_tensors=0"}, "must be > 0"},
      {{"--peer_policy=everyone"}, "peer_policy 'everyone' must be same_user, group or any"},
      {{"--max_client_outbox_bytes=1000"}, "max_client_outbox_bytes must be >= 64 KiB"},
      {{"--gpu_mode=fast"}, "gpu_mode: 'fast' is not one of auto, nccl, hierarchical"},
      {{"--cross_host_algorithm=tree"},
       "cross_host_algorithm: 'tree' is not one of auto, ring, recursive_doubling"},
      {{"--cross_host_chunk_bytes=0"}, "cross_host_chunk_bytes must be > 0"},
  };
  for (const Case& c : cases) {
    INFO("args: " << c.args[0]);
    auto r = Load(c.args);
    REQUIRE(!r.ok());
    CHECK(std::string(r.status().message()).find(c.expect) != std::string::npos);
    CHECK(std::string(r.status().message()).find('\n') == std::string::npos);
  }
}

TEST_CASE("SplitHostPort accepts IPv4, names and bracketed IPv6") {
  std::string host;
  int port = -1;
  REQUIRE(SplitHostPort("[::1]:7070", &host, &port).ok());
  CHECK(host == "[::1]");
  CHECK(port == 7070);
  REQUIRE(SplitHostPort("node-3.example:0", &host, &port).ok());
  CHECK(host == "node-3.example");
  CHECK(port == 0);
}

}  // namespace
}  // namespace ard::config
