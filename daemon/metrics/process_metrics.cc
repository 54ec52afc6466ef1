#include "daemon/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace ard::metrics {
namespace {

// Boot time (seconds since the epoch) from /proc/stat's btime line; 0 when absent.
double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value) return value;
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

uint64_t CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n > 0 ? n - 1 : 0;  // less the directory's own fd
}

}  // namespace

absl::StatusOr<ProcessSample> SampleProcess() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: fields are counted after the
  // last ')'. Field 3 (state) is the first one there.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::UnavailableError("cannot read /proc/self/stat");
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  ProcessSample s;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  for (int n = 3; fields >> field; ++n) {
    if (n == 14 || n == 15) s.cpu_seconds += std::stod(field) / ticks;  // utime, stime
    if (n == 22) s.start_time_seconds = BootTimeSeconds() + std::stod(field) / ticks;
    if (n == 23) s.virtual_bytes = std::stoull(field);
    if (n == 24) s.resident_bytes = static_cast<uint64_t>(std::stod(field) * page);
  }
  s.open_fds = CountOpenFds();
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) s.max_fds = lim.rlim_cur;
  return s;
}

void AddProcessMetrics(Registry& registry) {
  Family& cpu = registry.AddCounter("process_cpu_seconds_total",
                                    "User and system CPU time spent, in seconds.", {});
  Family& rss = registry.AddGauge("process_resident_memory_bytes", "Resident memory size.", {});
  Family& vsz = registry.AddGauge("process_virtual_memory_bytes", "Virtual memory size.", {});
  Family& fds = registry.AddGauge("process_open_fds", "Open file descriptors.", {});
  Family& max_fds =
      registry.AddGauge("process_max_fds", "Maximum open file descriptors (soft limit).", {});
  Family& start = registry.AddGauge("process_start_time_seconds",
                                    "Start time of the process since the Unix epoch, seconds.", {});
  registry.AddCollector([&cpu, &rss, &vsz, &fds, &max_fds, &start] {
    absl::StatusOr<ProcessSample> s = SampleProcess();
    if (!s.ok()) return;  // the series keep their last values
    cpu.Set({}, s->cpu_seconds);
    rss.Set({}, static_cast<double>(s->resident_bytes));
    vsz.Set({}, static_cast<double>(s->virtual_bytes));
    fds.Set({}, static_cast<double>(s->open_fds));
    max_fds.Set({}, static_cast<double>(s->max_fds));
    start.Set({}, s->start_time_seconds);
  });
}

}  // namespace ard::metrics
