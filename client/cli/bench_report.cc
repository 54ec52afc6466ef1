#include "client/cli/bench_report.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/bench_options.h"

namespace ard::cli {
namespace {

const char* RedopColumn(const BenchRunInfo& info) {
  return IsReduction(info.collective) ? ReduceOpName(info.reduce_op) : "none";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
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
  std::string out = absl::StrFormat(
      "# allreducectl bench: op %s, dtype %s, redop %s, %d ranks (%d per socket x %d socket%s), "
      "warmup %d, iters %d, job %s\n",
      CollectiveName(info.collective), DataTypeName(info.dtype), RedopColumn(info), info.ranks,
      info.np, info.sockets.size(), info.sockets.size() == 1 ? "" : "s", info.warmup, info.iters,
      info.job);
  absl::StrAppendFormat(&out, "# sockets: %s\n", absl::StrJoin(info.sockets, ","));
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

std::string FormatJson(const std::vector<BenchRow>& rows, const BenchRunInfo& info) {
  std::vector<std::string> sockets, items;
  for (const std::string& s : info.sockets) sockets.push_back(JsonString(s));
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
  return absl::StrCat("{\"op\":", JsonString(CollectiveName(info.collective)),
                      ",\"dtype\":", JsonString(DataTypeName(info.dtype)),
                      ",\"redop\":", JsonString(RedopColumn(info)), ",\"ranks\":", info.ranks,
                      ",\"np\":", info.np, ",\"sockets\":[", absl::StrJoin(sockets, ","),
                      "],\"job\":", JsonString(info.job), ",\"warmup\":", info.warmup,
                      ",\"iters\":", info.iters, ",\"check\":", info.check ? "true" : "false",
                      ",\"rows\":[", absl::StrJoin(items, ","),
                      "],\"avg_busbw\":", JsonNumber(AverageBusBandwidth(rows, info)), "}\n");
}

}  // namespace ard::cli
