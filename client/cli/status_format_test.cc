#include "client/cli/status_format.h"

#include "catch2/catch.hpp"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace ard::cli {
namespace {

GetClusterStatusResponse Sample() {
  GetClusterStatusResponse r;
  r.set_answered_by("b");
  r.set_forwarded(true);
  ClusterView* v = r.mutable_view();
  v->set_coordinator("a");
  v->set_coordinator_address("127.0.0.1:7070");
  v->set_membership_epoch(4);
  Host* a = v->add_hosts();
  a->set_name("a");
  a->set_address("127.0.0.1:7070");
  a->set_state(UP);
  a->set_coordinator(true);
  a->set_incarnation(1);
  Host* b = v->add_hosts();
  b->set_name("b");
  b->set_address("127.0.0.1:7071");
  b->set_state(DOWN);
  b->set_incarnation(2);
  b->set_down_reason("missed heartbeats for 5003 ms");
  GpuInfo* g = b->add_gpus();
  g->set_model("NVIDIA H100");
  return r;
}

TEST_CASE("table shows every host, its state and why it is down") {
  std::string t = FormatStatusTable(Sample());
  CHECK(t.find("coordinator a (127.0.0.1:7070)") != std::string::npos);
  CHECK(t.find("1 of 2 hosts UP (via b)") != std::string::npos);
  CHECK(t.find("127.0.0.1:7071") != std::string::npos);
  CHECK(t.find("DOWN") != std::string::npos);
  CHECK(t.find("missed heartbeats for 5003 ms") != std::string::npos);
  CHECK(t.find("1x NVIDIA H100") != std::string::npos);
  CHECK(t.find("Jobs:\n  (none)") != std::string::npos);
}

TEST_CASE("json has top-level hosts with name, address, state, and an empty jobs array") {
  auto json = FormatStatusJson(Sample());
  REQUIRE(json.ok());
  google::protobuf::Struct parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(*json, &parsed).ok());
  const auto& fields = parsed.fields();
  REQUIRE(fields.count("hosts") == 1);
  const auto& hosts = fields.at("hosts").list_value().values();
  REQUIRE(hosts.size() == 2);
  const auto& b = hosts[1].struct_value().fields();
  CHECK(b.at("name").string_value() == "b");
  CHECK(b.at("address").string_value() == "127.0.0.1:7071");
  CHECK(b.at("state").string_value() == "DOWN");
  REQUIRE(fields.count("jobs") == 1);
  CHECK(fields.at("jobs").list_value().values().empty());
  CHECK(fields.at("answered_by").string_value() == "b");
}

TEST_CASE("jobs show placement, progress and stalls") {
  GetClusterStatusResponse r = Sample();
  JobSummary* j = r.mutable_view()->add_jobs();
  j->set_name("train");
  j->set_size(2);
  j->set_state("running");
  j->set_collectives_completed(12);
  j->set_bytes_reduced(3 << 20);
  auto* hr = j->add_ranks();
  hr->set_host("a");
  hr->add_ranks(0);
  hr->add_ranks(1);
  auto* st = j->add_stalled();
  st->set_name("grad/w");
  st->set_waiting_s(65);
  st->add_missing_ranks(1);
  st->add_missing_last_activity_s(64);
  std::string t = FormatStatusTable(r);
  CHECK(t.find("a:[0,1]") != std::string::npos);
  CHECK(t.find("3.0 MiB") != std::string::npos);
  CHECK(t.find("1 stalled tensor(s)") != std::string::npos);
  CHECK(t.find("stalled: job train tensor grad/w waiting 1m05s; missing ranks 1 (last active "
               "1m04s ago)") != std::string::npos);
}

TEST_CASE("GPU path: each host's GPUs with memory and NCCL version, each job's devices") {
  GetClusterStatusResponse r = Sample();
  Host* b = r.mutable_view()->mutable_hosts(1);
  b->set_nccl_version("2.28.3");
  b->set_cuda_runtime_version("13.0");
  b->mutable_gpus(0)->set_memory_bytes(80ull << 30);
  b->mutable_gpus(0)->set_pci_bus_id("0000:3b:00.0");
  JobSummary* j = r.mutable_view()->add_jobs();
  j->set_name("train");
  auto* hr = j->add_ranks();
  hr->set_host("b");
  hr->add_ranks(0);
  hr->add_gpu_devices(0);
  j->set_gpu_plan("nccl: 1 communicator ranks, 1 here (single host)");
  std::string t = FormatStatusTable(r);
  CHECK(t.find("  gpu: job train nccl: 1 communicator ranks, 1 here (single host)\n") !=
        std::string::npos);
  CHECK(t.find("GPUs:\n  b gpu 0: NVIDIA H100, 80.0 GiB, 0000:3b:00.0 (NCCL 2.28.3, CUDA 13.0)") !=
        std::string::npos);
  CHECK(t.find("b:[0] gpu[0]") != std::string::npos);
  // A CPU-only cluster prints no GPU section.
  CHECK(FormatStatusTable(GetClusterStatusResponse()).find("GPUs:") == std::string::npos);
}

TEST_CASE("durations are compact") {
  CHECK(FormatDuration(1.25) == "1.2s");
  CHECK(FormatDuration(250) == "4m10s");
  CHECK(FormatDuration(7500) == "2h05m");
  CHECK(FormatDuration(3 * 86400 + 4 * 3600) == "3d04h");
}

}  // namespace
}  // namespace ard::cli
