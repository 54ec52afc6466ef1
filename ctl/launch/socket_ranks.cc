#include "ctl/launch/socket_ranks.h"

namespace ard::launch {

SocketRank SocketRankOf(int rank, int np) { return {rank, rank / np, rank % np}; }

std::vector<std::string> SocketRankEnv(const std::vector<std::string>& sockets, int np,
                                       const std::string& job, int rank) {
  const SocketRank r = SocketRankOf(rank, np);
  std::vector<std::string> env = {
      "ALLREDUCED_SOCKET=" + sockets[r.socket_index],
      "ALLREDUCED_RANK=" + std::to_string(rank),
      "ALLREDUCED_SIZE=" + std::to_string(sockets.size() * np),
      "ALLREDUCED_LOCAL_RANK=" + std::to_string(r.local_rank),
      "ALLREDUCED_LOCAL_SIZE=" + std::to_string(np),
  };
  if (!job.empty()) env.insert(env.begin() + 1, "ALLREDUCED_JOB=" + job);
  return env;
}

const std::vector<std::string>& SocketRankVariables() {
  static const std::vector<std::string> names = {"ALLREDUCED_SOCKET",     "ALLREDUCED_JOB",
                                                 "ALLREDUCED_RANK",       "ALLREDUCED_SIZE",
                                                 "ALLREDUCED_LOCAL_RANK", "ALLREDUCED_LOCAL_SIZE"};
  return names;
}

}  // namespace ard::launch
