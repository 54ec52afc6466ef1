// The ranks of a local launch over daemon sockets (one socket = one daemon = one host): `np`
// processes per socket, rank = socket_index * np + local_rank, which is also the order in which
// the daemons number a job's ranks when a launcher gives none (host order, then local rank); and
// the ALLREDUCED_* variables that tell each process its daemon, job and place (client/env_ranks.h
// reads them). allreduced.launch.rank_env is the Python twin. Pure functions, any thread.
#pragma once

#include <string>
#include <vector>

namespace ard::launch {

struct SocketRank {
  int rank = 0;
  int socket_index = 0;
  int local_rank = 0;
};

// Where rank `rank` of a launch of `np` processes per socket runs.
SocketRank SocketRankOf(int rank, int np);

// ALLREDUCED_SOCKET, _JOB, _RANK, _SIZE, _LOCAL_RANK and _LOCAL_SIZE of rank `rank`, as
// "NAME=value" (ALLREDUCED_JOB left out when `job` is empty).
std::vector<std::string> SocketRankEnv(const std::vector<std::string>& sockets, int np,
                                       const std::string& job, int rank);

// The names of the variables SocketRankEnv sets, to drop inherited ones.
const std::vector<std::string>& SocketRankVariables();

}  // namespace ard::launch
