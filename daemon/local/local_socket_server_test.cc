#include "daemon/local/local_socket_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "catch2/catch.hpp"

namespace ard::local {
namespace {

class NullHandler : public SessionHandler {
 public:
  void OnFrame(const std::shared_ptr<Session>&, DecodedFrame, int fd) override {
    if (fd >= 0) close(fd);
  }
  void OnClosed(const std::shared_ptr<Session>&, bool, const std::string&) override {}
};

// A server on its own (not yet running) loop; Start()/Stop() before the loop runs are allowed.
struct Server {
  explicit Server(const std::string& path, const std::string& group = "")
      : server(loop, LocalSocketOptions{path, group}, handler) {}
  ~Server() {
    loop.Stop();
    server.Stop();
  }
  absl::Status Start() { return server.Start(); }
  void Stop() { server.Stop(); }
  EventLoop loop{"test-loop"};
  NullHandler handler;
  LocalSocketServer server;
};

// Under /tmp, not $TEST_TMPDIR: Bazel's test tmpdir is longer than a Unix socket path may be.
// Each directory is removed when the test binary exits.
std::string TempDir() {
  struct Dirs {
    std::vector<std::string> paths;
    ~Dirs() {
      for (const auto& p : paths) std::filesystem::remove_all(p);
    }
  };
  static Dirs dirs;
  char tmpl[] = "/tmp/ard-lss.XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  dirs.paths.push_back(tmpl);
  return tmpl;
}

int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_CASE("creates parent directories and a 0660 seqpacket socket, removes it at Stop") {
  std::string path = TempDir() + "/run/ard/d.sock";
  Server server(path);
  REQUIRE(server.Start().ok());
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0660);
  int fd = Connect(path);
  REQUIRE(fd >= 0);
  close(fd);
  server.Stop();
  CHECK(stat(path.c_str(), &st) != 0);
}

TEST_CASE("a stale socket file is replaced; a live one is not stolen") {
  std::string path = TempDir() + "/d.sock";
  {
    // Leave a stale socket file behind: bound, then closed without unlink.
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    close(fd);
  }
  Server first(path);
  REQUIRE(first.Start().ok());
  Server second(path);
  absl::Status s = second.Start();
  REQUIRE(!s.ok());
  CHECK(std::string(s.message()).find("in use by another running daemon") != std::string::npos);
  // The first server still serves.
  int fd = Connect(path);
  CHECK(fd >= 0);
  close(fd);
}

TEST_CASE("a path that is not a socket is never deleted") {
  std::string path = TempDir() + "/precious";
  std::ofstream(path) << "data";
  Server server(path);
  absl::Status s = server.Start();
  REQUIRE(!s.ok());
  CHECK(std::string(s.message()).find("is not a socket") != std::string::npos);
  std::ifstream in(path);
  std::string content;
  in >> content;
  CHECK(content == "data");
}

TEST_CASE("an uncreatable parent directory and an unknown group are clear errors") {
  std::string file = TempDir() + "/file";
  std::ofstream(file) << "x";
  Server under_file(file + "/sub/d.sock");
  absl::Status s = under_file.Start();
  REQUIRE(!s.ok());
  CHECK(std::string(s.message()).find("not a directory") != std::string::npos);
  Server bad_group(TempDir() + "/d.sock", "no-such-group-ard");
  s = bad_group.Start();
  REQUIRE(!s.ok());
  CHECK(std::string(s.message()).find("no-such-group-ard") != std::string::npos);
}

}  // namespace
}  // namespace ard::local
