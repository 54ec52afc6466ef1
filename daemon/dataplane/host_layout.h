// Where a cross-host job's ranks live: built at formation from the coordinator's layout, read by
// the TCP data plane (tcp_collective.h, tcp_allreduce.h) and the job's negotiator. Plain data.
#pragma once

#include <string>
#include <vector>

namespace ard::dataplane {

// Which host runs which rank of a cross-host job (host index = cross rank).
struct HostLayout {
  std::string job;  // for messages
  int size = 0;     // ranks of the job
  int cross_rank = 0;
  int cross_size = 1;
  std::vector<int> host_of_rank;                // index = rank -> cross rank
  std::vector<std::vector<int>> ranks_of_host;  // cross rank -> its ranks, ascending
  std::vector<std::string> host_names;          // cross rank -> host name
};

}  // namespace ard::dataplane
