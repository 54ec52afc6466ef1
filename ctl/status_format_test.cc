#include "ctl/status_format.h"

#include "catch2/catch.hpp"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace ard::ctl {
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

TEST_CASE("an elastic job: its generation, members and the history of its changes") {
  GetClusterStatusResponse r = Sample();
  JobSummary* j = r.mutable_view()->add_jobs();
  j->set_name("train");
  j->set_size(4);
  j->set_state("running");
  j->set_generation(3);
  j->set_elastic_min_np(2);
  j->set_elastic_max_np(8);
  for (const char* host : {"a", "c"}) {
    auto* hr = j->add_ranks();
    hr->set_host(host);
    hr->add_ranks(host[0] == 'a' ? 0 : 2);
    hr->add_ranks(host[0] == 'a' ? 1 : 3);
  }
  auto change = [&](double age_s, uint64_t generation, const char* what, uint32_t size,
                    std::vector<std::string> hosts, const char* detail) {
    auto* c = j->add_elastic_changes();
    c->set_age_s(age_s);
    c->set_generation(generation);
    c->set_change(what);
    c->set_size(size);
    for (const auto& h : hosts) c->add_hosts(h);
    c->set_detail(detail);
  };
  change(70, 1, "formed", 4, {"a", "b"}, "");
  change(40, 1, "lost", 0, {}, "host b is DOWN (missed heartbeats for 1003 ms)");
  change(39, 2, "shrunk", 2, {"a"}, "-b");
  change(20, 2, "hosts updated", 2, {"c"}, "");
  change(19.5, 2, "ended", 0, {}, "every host left");
  change(19, 3, "grown", 4, {"a", "c"}, "+c");
  const std::string t = FormatStatusTable(r);
  INFO(t);
  CHECK(t.find("  elastic: job train generation 3 (min_np 2, max_np 8): running, 4 ranks "
               "a:[0,1] c:[2,3]\n"
               "    1m10s ago  generation 1 formed: 4 ranks on a, b\n"
               "    40.0s ago  generation 1 lost: host b is DOWN (missed heartbeats for 1003 ms)\n"
               "    39.0s ago  generation 2 shrunk: 2 ranks on a (-b)\n"
               "    20.0s ago  generation 2 hosts updated: 2 rank(s) of host c wait to join\n"
               "    19.5s ago  generation 2 ended: every host left\n"
               "    19.0s ago  generation 3 grown: 4 ranks on a, c (+c)\n") != std::string::npos);
  auto json = FormatStatusJson(r);
  REQUIRE(json.ok());
  CHECK(
      json->find("\"elastic_changes\":[{\"age_s\":70,\"generation\":\"1\",\"change\":\"formed\"") !=
      std::string::npos);
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

GetClusterStatusResponse CutOff() {
  GetClusterStatusResponse r;
  r.set_answered_by("b");
  r.set_cluster_view_error("host b cannot reach the coordinator at 127.0.0.1:7070: refused");
  LocalView* l = r.mutable_local();
  l->set_host("b");
  l->set_address("127.0.0.1:7071");
  l->set_role("follower");
  l->set_coordinator_address("127.0.0.1:7070");
  l->set_membership("joining");
  l->set_join_attempts(12);
  l->set_last_error("UNAVAILABLE: refused");
  l->set_last_contact_age_s(-1);
  l->set_version("0.1.0");
  l->set_pid(42);
  JobSummary* j = l->add_jobs();
  j->set_name("train");
  j->set_state("forming");
  j->set_size(4);
  j->set_registered_ranks(2);
  return r;
}

TEST_CASE("a follower without a cluster view: the reason, its own state and its jobs") {
  std::string t = FormatStatusTable(CutOff());
  CHECK(t.rfind("Cluster view unavailable: host b cannot reach the coordinator at "
                "127.0.0.1:7070: refused\n\nLocal view of host b (127.0.0.1:7071, follower):\n",
                0) == 0);
  CHECK(t.find("  coordinator   127.0.0.1:7070\n") != std::string::npos);
  CHECK(t.find("  membership    joining (not a cluster member; 12 join attempt(s) so far)\n") !=
        std::string::npos);
  CHECK(t.find("  incarnation   - (never joined)\n") != std::string::npos);
  CHECK(t.find("  last contact  never\n") != std::string::npos);
  CHECK(t.find("  last error    UNAVAILABLE: refused\n") != std::string::npos);
  CHECK(t.find("  version       0.1.0 (pid 42)\n") != std::string::npos);
  CHECK(t.find("Jobs on host b:\n") != std::string::npos);
  CHECK(t.find("2 of 4 ranks registered") != std::string::npos);
  CHECK(t.find("HOST  ADDRESS") == std::string::npos);  // no (empty) cluster table

  auto json = FormatStatusJson(CutOff());
  REQUIRE(json.ok());
  google::protobuf::Struct parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(*json, &parsed).ok());
  const auto& fields = parsed.fields();
  CHECK(fields.at("cluster_view_error").string_value() ==
        "host b cannot reach the coordinator at 127.0.0.1:7070: refused");
  CHECK(fields.at("forwarded").bool_value() == false);
  CHECK(fields.at("hosts").list_value().values().empty());
  const auto& local = fields.at("local").struct_value().fields();
  CHECK(local.at("membership").string_value() == "joining");
  CHECK(local.at("join_attempts").number_value() == 12);
  CHECK(local.at("last_contact_age_s").number_value() == -1);
  CHECK(local.at("coordinator_address").string_value() == "127.0.0.1:7070");
  CHECK(local.at("jobs").list_value().values(0).struct_value().fields().at("name").string_value() ==
        "train");
  // With a cluster view: the error is "" and a coordinator's answer has no local view.
  auto ok = FormatStatusJson(Sample());
  REQUIRE(ok.ok());
  REQUIRE(google::protobuf::util::JsonStringToMessage(*ok, &parsed).ok());
  CHECK(parsed.fields().at("cluster_view_error").string_value().empty());
  CHECK(parsed.fields().count("local") == 0);
}

TEST_CASE("durations are compact") {
  CHECK(FormatDuration(1.25) == "1.2s");
  CHECK(FormatDuration(250) == "4m10s");
  CHECK(FormatDuration(7500) == "2h05m");
  CHECK(FormatDuration(3 * 86400 + 4 * 3600) == "3d04h");
}

}  // namespace
}  // namespace ard::ctl
