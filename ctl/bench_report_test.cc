#include "ctl/bench_report.h"

#include "catch2/catch.hpp"

namespace ard::ctl {
namespace {

BenchRunInfo Info(int collective, int ranks, bool check) {
  BenchRunInfo info;
  info.collective = collective;
  info.dtype = 9;
  info.reduce_op = 1;
  info.ranks = ranks;
  info.np = ranks;
  info.sockets = {"/tmp/a \"quoted\".sock"};
  info.warmup = 5;
  info.iters = 20;
  info.check = check;
  info.job = "bench-1-2";
  return info;
}

BenchRow Row(uint64_t size, uint64_t count, double time_us, uint64_t wrong = 0) {
  BenchRow r;
  r.layout.size_bytes = size;
  r.layout.count = count;
  r.time_us = time_us;
  r.wrong = wrong;
  return r;
}

TEST_CASE("algbw is size over time in GB/s, busbw scales it by the op's factor") {
  BenchRow r = Row(1000000, 250000, 1000);  // 1 MB in 1 ms
  CHECK(AlgBandwidth(r) == Approx(1.0));
  CHECK(BusBandwidth(r, Info(1, 4, false)) == Approx(1.5));
  CHECK(BusBandwidth(r, Info(2, 4, false)) == Approx(0.75));
  CHECK(AlgBandwidth(Row(8, 2, 0)) == 0);
}

TEST_CASE("table rows line up under the header like nccl-tests'") {
  const BenchRunInfo info = Info(1, 2, false);
  std::string header = FormatTableHeader(info);
  CHECK(header.find("op allreduce, dtype float32, redop sum, 2 ranks (2 per socket x 1 socket)") !=
        std::string::npos);
  CHECK(header.find("#       size        count     type  redop       time   algbw   busbw\n") !=
        std::string::npos);
  CHECK(FormatTableRow(Row(1048576, 262144, 1371.6), info) ==
        "     1048576       262144  float32    sum     1371.6    0.76    0.76\n");
}

TEST_CASE("--check adds #wrong; non-reductions show redop none") {
  const BenchRunInfo info = Info(2, 4, true);
  CHECK(FormatTableHeader(info).find("busbw #wrong\n") != std::string::npos);
  CHECK(FormatTableRow(Row(4096, 256, 10.0, 3), info) ==
        "        4096          256  float32   none       10.0    0.41    0.31      3\n");
  std::string footer = FormatTableFooter({Row(4096, 256, 10.0, 3)}, info);
  CHECK(footer.find("# Out of bounds values : 3 FAILED") != std::string::npos);
  CHECK(footer.find("# Avg bus bandwidth    : 0.3072") != std::string::npos);
}

TEST_CASE("json: one object with the run and its rows") {
  std::string json = FormatJson({Row(1000000, 250000, 1000, 0)}, Info(1, 4, true));
  CHECK(json ==
        "{\"op\":\"allreduce\",\"dtype\":\"float32\",\"redop\":\"sum\",\"ranks\":4,\"np\":4,"
        "\"sockets\":[\"/tmp/a \\\"quoted\\\".sock\"],\"job\":\"bench-1-2\",\"warmup\":5,"
        "\"iters\":20,\"check\":true,\"rows\":[{\"size\":1000000,\"count\":250000,"
        "\"type\":\"float32\",\"redop\":\"sum\",\"time_us\":1000,\"algbw\":1,\"busbw\":1.5,"
        "\"wrong\":0}],\"avg_busbw\":1.5}\n");
  CHECK(FormatJson({}, Info(1, 2, false)).find("\"rows\":[],\"avg_busbw\":0}") !=
        std::string::npos);
}

TEST_CASE("--device gpu: a device line, the peer's header, ratios, and the peer in json") {
  BenchRunInfo info = Info(1, 4, true);
  info.gpu = true;
  CHECK(FormatTableHeader(info).find("# device: gpu") != std::string::npos);
  CHECK(FormatTableHeader(Info(1, 4, true)).find("# device") == std::string::npos);

  BenchRunInfo peer = info;
  peer.ranks = peer.np = 2;
  peer.sockets.clear();
  peer.peer = "NCCL 2.28.3 ncclAllReduce, 2 ranks in one process";
  const std::string header = FormatTableHeader(peer);
  CHECK(header.rfind("# peer: NCCL 2.28.3 ncclAllReduce, 2 ranks in one process; op allreduce",
                     0) == 0);
  CHECK(header.find("# sockets") == std::string::npos);
  CHECK(header.find("busbw #wrong\n") != std::string::npos);  // the same columns as the daemon's

  // 1 MB: daemon 2000 us on 4 ranks (busbw 0.75), NCCL 1000 us on 2 ranks (busbw 1.0).
  const std::vector<BenchRow> rows = {Row(1000000, 250000, 2000)};
  const std::vector<BenchRow> peer_rows = {Row(1000000, 250000, 1000)};
  const std::string ratios = FormatRatioTable(rows, info, peer_rows, peer);
  CHECK(ratios.find("allreduced (4 ranks) / peer (2 ranks)") != std::string::npos);
  CHECK(ratios.find("     1000000     2000.0     1000.0        2.00        0.75\n") !=
        std::string::npos);

  const std::string json = FormatJson(rows, info, &peer_rows, &peer);
  CHECK(json.find(",\"device\":\"gpu\",\"peer\":{\"name\":\"NCCL 2.28.3 ncclAllReduce, 2 ranks in "
                  "one process\",\"ranks\":2,\"rows\":[{\"size\":1000000,") != std::string::npos);
  CHECK(json.find("\"ratios\":[{\"size\":1000000,\"time\":2,\"busbw\":0.75}]}\n") !=
        std::string::npos);
  CHECK(FormatJson(rows, Info(1, 4, true)).find("device") == std::string::npos);
}

}  // namespace
}  // namespace ard::ctl
