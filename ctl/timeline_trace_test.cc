#include "ctl/timeline_trace.h"

#include <catch2/catch.hpp>

namespace ard::ctl {
namespace {

void Mark(StopTimelineResponse* r, int64_t t, uint32_t mark, int rank, uint64_t group,
          const std::string& tensor) {
  TimelineEvent* e = r->add_events();
  e->set_time_us(t);
  e->set_mark(mark);
  e->set_rank(rank);
  e->set_group(group);
  e->set_tensor(tensor);
}

// Host a (coordinator, ranks 0, 1) and host b (ranks 2, 3, its clock 1000 us behind), one fused
// group of tensors x and y; rank 3 submits last.
std::vector<StopTimelineResponse> TwoHosts() {
  StopTimelineResponse a, b;
  a.set_host("a");
  b.set_host("b");
  b.set_clock_offset_us(1000);
  for (const char* t : {"x", "y"}) {
    Mark(&a, 100, 1, 0, 0, t);
    Mark(&a, 110, 1, 1, 0, t);
    Mark(&a, 110, 2, -1, 0, t);
    Mark(&b, -900, 1, 2, 0, t);  // 100 on a's clock
    Mark(&b, -700, 1, 3, 0, t);  // 300
    Mark(&b, -700, 2, -1, 0, t);
    Mark(&a, 320, 3, -1, 1, t);
    Mark(&b, -680, 3, -1, 7, t);  // 320
  }
  Mark(&a, 330, 4, -1, 1, "");
  Mark(&a, 340, 5, -1, 1, "");
  Mark(&a, 400, 6, -1, 1, "");
  Mark(&a, 410, 7, -1, 1, "");
  Mark(&b, -670, 4, -1, 7, "");
  Mark(&b, -660, 5, -1, 7, "");
  Mark(&b, -600, 6, -1, 7, "");
  Mark(&b, -585, 7, -1, 7, "");
  return {a, b};
}

TEST_CASE("every rank's every tensor gets its six phases, hosts aligned") {
  TraceStats stats;
  const std::string json = WriteChromeTrace("j", TwoHosts(), &stats);
  CHECK(stats.instances == 8);  // 4 ranks x 2 tensors
  CHECK(stats.groups == 2);     // the group, once per host
  CHECK(stats.slices == 8 * 6 + 2);
  CHECK(json.find("\"name\":\"host a\"") != std::string::npos);
  CHECK(json.find("\"name\":\"host b\"") != std::string::npos);
  CHECK(json.find("\"name\":\"rank 3 y\"") != std::string::npos);
  CHECK(json.find("\"group 7 (2 tensors)\"") != std::string::npos);
  // Rank 2 (b, at 100 aligned, base 100) waited for rank 3 on its host until 300.
  CHECK(json.find("\"name\":\"wait for ranks\",\"ts\":0,\"dur\":200,\"args\":{\"tensor\":\"x\","
                  "\"host\":\"b\",\"group\":7,\"group_size\":2,\"rank\":2,\"waiting_for\":[3]}") !=
        std::string::npos);
  // Host a's negotiation waited for rank 3 on b, the host ready last.
  CHECK(json.find("\"name\":\"negotiation\",\"ts\":10,\"dur\":210,\"args\":{\"tensor\":\"x\","
                  "\"host\":\"a\",\"group\":1,\"group_size\":2,\"rank\":0,\"waiting_for\":[3],"
                  "\"last_host\":\"b\"}") != std::string::npos);
}

TEST_CASE("a group carried in the round that agreed it: queued, then result out") {
  StopTimelineResponse a;
  a.set_host("a");
  Mark(&a, 100, 1, 0, 0, "x");
  Mark(&a, 100, 2, -1, 0, "x");
  Mark(&a, 150, 3, -1, 1, "x");  // the round agreed it and carried its data
  Mark(&a, 160, 4, -1, 1, "");
  Mark(&a, 165, 8, -1, 1, "");
  Mark(&a, 170, 7, -1, 1, "");
  TraceStats stats;
  const std::string json = WriteChromeTrace("j", {a}, &stats);
  CHECK(stats.instances == 1);
  CHECK(stats.slices == 4 + 1);  // wait (zero long), negotiation, queued, result out; the group
  CHECK(json.find("\"local reduce\"") == std::string::npos);
  CHECK(json.find("\"cross-host transfer\"") == std::string::npos);
  CHECK(json.find("\"name\":\"result out\",\"ts\":60,\"dur\":10,\"args\":{\"tensor\":\"x\","
                  "\"host\":\"a\",\"group\":1,\"group_size\":1,\"rank\":0,"
                  "\"carried_in_round\":true}") != std::string::npos);
}

TEST_CASE("a submission not ready when the recording stopped is left out") {
  StopTimelineResponse a;
  a.set_host("a");
  Mark(&a, 100, 1, 0, 0, "x");
  TraceStats stats;
  WriteChromeTrace("j", {a}, &stats);
  CHECK(stats.slices == 0);
  CHECK(stats.instances == 0);
}

}  // namespace
}  // namespace ard::ctl
