#include "ctl/bench_report.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ctl/bench_options.h"
#include "ctl/json_text.h"

namespace ard::ctl {
namespace {

const char* RedopColumn(const BenchRunInfo& info) {
  return IsReduction(info.collective) ? ReduceOpName(info.reduce_op) : "none";
}

// Doubles as JSON numbers: finite, enough digits for GB/s and microseconds.
std::string JsonNumber(double v) { return absl::StrFormat("%.6g", v); }

double AverageBusBandwidth(const std::vector<BenchRow>& rows, const BenchRunInfo& info) {
  if (rows.empty()) return 0;
  double sum = 0;
  for (const BenchRow& r : rows) sum += BusBandwidth(r, info);
  return sum / rows.size();
}

}  // namespace

double AlgBandwidth(const BenchRow& row) {
  if (row.time_us <= 0) return 0;
  return static_cast<double>(row.layout.size_bytes) / 1e9 / (row.time_us * 1e-6);
}

double BusBandwidth(const BenchRow& row, const BenchRunInfo& info) {
  return AlgBandwidth(row) * BusBandwidthFactor(info.collective, info.ranks);
}

std::string FormatTableHeader(const BenchRunInfo& info) {
  std::string out;
  if (!info.peer.empty()) {
    out = absl::StrFormat("# peer: %s; op %s, dtype %s, redop %s, %d ranks, warmup %d, iters %d\n",
                          info.peer, CollectiveName(info.collective), DataTypeName(info.dtype),
                          RedopColumn(info), info.ranks, info.warmup, info.iters);
  } else {
    out = absl::StrFormat(
        "# allreducectl bench: op %s, dtype %s, redop %s, %d ranks (%d per socket x %d socket%s), "
        "warmup %d, iters %d, job %s\n",
        CollectiveName(info.collective), DataTypeName(info.dtype), RedopColumn(info), info.ranks,
        info.np, info.sockets.size(), info.sockets.size() == 1 ? "" : "s", info.warmup, info.iters,
        info.job);
    absl::StrAppendFormat(&out, "# sockets: %s\n", absl::StrJoin(info.sockets, ","));
    if (info.gpu) {
      out +=
          "# device: gpu (each rank on CUDA device local_rank mod GPUs; ard_submit_device on its "
          "own stream, timed to cuStreamSynchronize)\n";
    }
  }
  absl::StrAppendFormat(&out, "#%11s %12s %8s %6s %10s %7s %7s%s\n", "size", "count", "type",
                        "redop", "time", "algbw", "busbw", info.check ? " #wrong" : "");
  absl::StrAppendFormat(&out, "#%11s %12s %8s %6s %10s %7s %7s\n", "(B)", "(elements)", "", "",
                        "(us)", "(GB/s)", "(GB/s)");
  return out;
}

std::string FormatTableRow(const BenchRow& row, const BenchRunInfo& info) {
  std::string out = absl::StrFormat("%12u %12u %8s %6s %10.1f %7.2f %7.2f", row.layout.size_bytes,
                                    row.layout.count, DataTypeName(info.dtype), RedopColumn(info),
                                    row.time_us, AlgBandwidth(row), BusBandwidth(row, info));
  if (info.check) absl::StrAppendFormat(&out, " %6u", row.wrong);
  return out + "\n";
}

std::string FormatTableFooter(const std::vector<BenchRow>& rows, const BenchRunInfo& info) {
  std::string out;
  if (info.check) {
    uint64_t wrong = 0;
    for (const BenchRow& r : rows) wrong += r.wrong;
    absl::StrAppendFormat(&out, "# Out of bounds values : %u %s\n", wrong,
                          wrong == 0 ? "OK" : "FAILED");
  }
  absl::StrAppendFormat(&out, "# Avg bus bandwidth    : %.4f\n", AverageBusBandwidth(rows, info));
  return out;
}

namespace {

std::string JsonRows(const std::vector<BenchRow>& rows, const BenchRunInfo& info) {
  std::vector<std::string> items;
  for (const BenchRow& r : rows) {
    std::string item = absl::StrCat(
        "{\"size\":", r.layout.size_bytes, ",\"count\":", r.layout.count,
        ",\"type\":", JsonString(DataTypeName(info.dtype)),
        ",\"redop\":", JsonString(RedopColumn(info)), ",\"time_us\":", JsonNumber(r.time_us),
        ",\"algbw\":", JsonNumber(AlgBandwidth(r)),
        ",\"busbw\":", JsonNumber(BusBandwidth(r, info)));
    if (info.check) absl::StrAppend(&item, ",\"wrong\":", r.wrong);
    items.push_back(item + "}");
  }
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

std::string FormatJson(const std::vector<BenchRow>& rows, const BenchRunInfo& info,
                       const std::vector<BenchRow>* peer_rows, const BenchRunInfo* peer_info) {
  std::vector<std::string> sockets;
  for (const std::string& s : info.sockets) sockets.push_back(JsonString(s));
  std::string out = absl::StrCat(
      "{\"op\":", JsonString(CollectiveName(info.collective)),
      ",\"dtype\":", JsonString(DataTypeName(info.dtype)),
      ",\"redop\":", JsonString(RedopColumn(info)), ",\"ranks\":", info.ranks, ",\"np\":", info.np,
      ",\"sockets\":[", absl::StrJoin(sockets, ","), "],\"job\":", JsonString(info.job),
      ",\"warmup\":", info.warmup, ",\"iters\":", info.iters,
      ",\"check\":", info.check ? "true" : "false", ",\"rows\":", JsonRows(rows, info),
      ",\"avg_busbw\":", JsonNumber(AverageBusBandwidth(rows, info)));
  if (info.gpu) out += ",\"device\":\"gpu\"";
  if (peer_rows != nullptr && peer_info != nullptr) {
    absl::StrAppend(&out, ",\"peer\":{\"name\":", JsonString(peer_info->peer),
                    ",\"ranks\":", peer_info->ranks, ",\"rows\":", JsonRows(*peer_rows, *peer_info),
                    ",\"avg_busbw\":", JsonNumber(AverageBusBandwidth(*peer_rows, *peer_info)),
                    "},\"ratios\":[");
    for (size_t i = 0; i < rows.size() && i < peer_rows->size(); ++i) {
      absl::StrAppend(
          &out, i == 0 ? "" : ",", "{\"size\":", rows[i].layout.size_bytes,
          ",\"time\":", JsonNumber(Ratio(rows[i].time_us, (*peer_rows)[i].time_us)), ",\"busbw\":",
          JsonNumber(Ratio(BusBandwidth(rows[i], info), BusBandwidth((*peer_rows)[i], *peer_info))),
          "}");
    }
    out += "]";
  }
  return out + "}\n";
}

std::string FormatRatioTable(const std::vector<BenchRow>& rows, const BenchRunInfo& info,
                             const std::vector<BenchRow>& peer_rows,
                             const BenchRunInfo& peer_info) {
  std::string out = absl::StrFormat(
      "# allreduced (%d ranks) / peer (%d ranks): time ratio above 1 = allreduced is slower\n",
      info.ranks, peer_info.ranks);
  absl::StrAppendFormat(&out, "#%11s %10s %10s %11s %11s\n", "size", "time", "peer time",
                        "time ratio", "busbw ratio");
  absl::StrAppendFormat(&out, "#%11s %10s %10s\n", "(B)", "(us)", "(us)");
  for (size_t i = 0; i < rows.size() && i < peer_rows.size(); ++i) {
    absl::StrAppendFormat(
        &out, "%12u %10.1f %10.1f %11.2f %11.2f\n", rows[i].layout.size_bytes, rows[i].time_us,
        peer_rows[i].time_us, Ratio(rows[i].time_us, peer_rows[i].time_us),
        Ratio(BusBandwidth(rows[i], info), BusBandwidth(peer_rows[i], peer_info)));
  }
  return out;
}

}  // namespace ard::ctl
