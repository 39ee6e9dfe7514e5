// A real ferryd process on 127.0.0.1 for a test: its own token file, a free
// port (or a chosen one, to restart on the same address), killed at the end.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <random>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ferry::testing {

inline std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A free port below Linux's ephemeral range (32768-60999): a server restarted
// on it cannot find it taken by some outgoing connection's local end.
inline std::uint16_t stable_port() {
  std::mt19937 rng(static_cast<unsigned>(::getpid()) ^ static_cast<unsigned>(std::time(nullptr)));
  for (int attempt = 0; attempt < 100; ++attempt) {
    const auto port = static_cast<std::uint16_t>(20000 + rng() % 12000);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (ok) return port;
  }
  return free_port();
}

class LocalFerryd {
 public:
  explicit LocalFerryd(std::uint16_t port = 0, std::vector<std::string> extra = {}, std::string token = "test-token")
      : dir_(std::filesystem::temp_directory_path() / ("ferryd_test_" + std::to_string(::getpid()) + "_" +
                                                       std::to_string(counter()++))) {
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "token") << token;
    std::filesystem::permissions(dir_ / "token", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    start(port, std::move(extra));
  }
  ~LocalFerryd() {
    kill(SIGKILL);
    std::filesystem::remove_all(dir_);
  }

  void start(std::uint16_t port, std::vector<std::string> extra = {}) {
    std::filesystem::remove(dir_ / "port");
    std::vector<std::string> args{FERRYD_PATH, "--listen", "127.0.0.1:" + std::to_string(port), "--token-file",
                                  (dir_ / "token").string(), "--port-file", (dir_ / "port").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, (dir_ / "log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start ferryd");
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 200 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // it gave up (e.g. the port is still taken)
        pid_ = -1;
        break;
      }
      std::ifstream in(dir_ / "port");
      unsigned p = 0;
      if (in >> p) port_ = last_port_ = static_cast<std::uint16_t>(p);
    }
    if (port_ == 0) throw std::runtime_error("ferryd did not start: " + log());
  }

  // Sends a signal and waits for the process; returns its exit status (or -signal).
  int kill(int signal) {
    if (pid_ <= 0) return 0;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    port_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  // On the port it had, so clients find it where it was; the old socket may
  // linger a moment (as after any crash), so retry as a supervisor would.
  void restart() {
    for (int attempt = 0;; ++attempt) {
      try {
        start(last_port_);
        return;
      } catch (const std::exception&) {
        kill(SIGKILL);
        if (attempt == 40) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
  }

  std::uint16_t port() const { return last_port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(last_port_); }
  std::filesystem::path token_file() const { return dir_ / "token"; }
  std::string log() const {
    std::ifstream in(dir_ / "log");
    return {std::istreambuf_iterator<char>(in), {}};
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
  std::uint16_t last_port_ = 0;
};

}  // namespace ferry::testing
