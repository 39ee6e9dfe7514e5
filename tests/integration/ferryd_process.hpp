// A real ferryd for a test: a temporary folder with a token file, the
// server started with --listen 127.0.0.1:PORT (0: a free one) --port-file,
// its output kept in a log file the test can read, and the process killed if
// the test does not stop it itself. It can be stopped and restarted on the
// same port, as a supervisor would after a crash.
//
// The server computes on its CPUs (--gpus none) unless the test's own
// arguments name GPUs: tests compare remote results with the client's CPU
// bit for bit and count the server's devices, which a GPU host would change.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <regex>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ferry::test {

inline std::filesystem::path make_temp_dir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ferryd-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
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
  throw std::runtime_error("no free port below the ephemeral range");
}

// The ferryd the tests start: the build's, unless FERRY_TEST_FERRYD names
// another (tests/sanitizers/run_ferryd_asan.sh runs these tests against an
// ASan/UBSan build of ferryd).
inline const char* ferryd_path() {
  const char* chosen = std::getenv("FERRY_TEST_FERRYD");
  return chosen != nullptr && *chosen != '\0' ? chosen : FERRYD_PATH;
}

// Starts the program argv[0] with the rest as its arguments, its output and
// errors written to `log`; its pid. Throws when it cannot start.
inline pid_t spawn_logged(std::vector<std::string> argv, const std::filesystem::path& log) {
  std::vector<char*> pointers;
  for (auto& a : argv) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, pointers[0], &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + " failed");
  return pid;
}

class FerrydProcess {
 public:
  static constexpr const char* default_token = "correct horse battery staple";

  // Runs ferryd with `args` as given (no defaults added); for command-line tests.
  static int run_to_exit(const std::vector<std::string>& args, std::string* output = nullptr) {
    FerrydProcess p(std::nullopt);
    p.spawn(args);
    const int status = p.wait_exit(std::chrono::seconds(20));
    if (output) *output = p.log();
    return status;
  }

  explicit FerrydProcess(std::vector<std::string> extra_args = {}, std::string token = default_token,
                         std::uint16_t port = 0)
      : FerrydProcess(std::optional<std::string>(std::move(token))) {
    extra_args_ = std::move(extra_args);
    start(port);
  }

  // How long a ferryd given GPUs may take to start, and to log them: it
  // probes each GPU at start (a timed GEMM and copy, after making its
  // context), one after another, so a host with eight GPUs needs tens of
  // seconds where one GPU needs two or three.
  static constexpr std::chrono::seconds gpu_start_timeout{60};

  // What start() runs ferryd with: the test's `extra` after the fixed
  // arguments, and `--gpus none` unless `extra` says --gpus itself.
  static std::vector<std::string> server_args(std::uint16_t port, const std::filesystem::path& token_file,
                                              const std::filesystem::path& port_file,
                                              const std::vector<std::string>& extra) {
    std::vector<std::string> args{"--token-file", token_file.string(), "--port-file", port_file.string(), "--workers",
                                  "2"};
    // The test's own --listen (another loopback address) replaces the default.
    if (std::find(extra.begin(), extra.end(), "--listen") == extra.end())
      args.insert(args.begin(), {"--listen", "127.0.0.1:" + std::to_string(port)});
    const bool names_gpus = std::any_of(extra.begin(), extra.end(), [](const std::string& a) {
      return a == "--gpus" || a.starts_with("--gpus=");
    });
    if (!names_gpus) args.insert(args.end(), {"--gpus", "none"});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // Sends `signo` and waits for the exit status (as wait_exit reports it).
  int stop(int signo) {
    signal(signo);
    return wait_exit(std::chrono::seconds(20));
  }

  // On the port it had, so clients find it where it was; the old socket may
  // linger a moment, so retry as a supervisor would.
  void restart() {
    for (int attempt = 0;; ++attempt) {
      try {
        start(port_);
        return;
      } catch (const std::exception&) {
        if (attempt == 40) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
  }

  // Where it listens: 127.0.0.1, or the host of the test's own --listen
  // (another loopback address, an address inside a network namespace).
  std::string address() const {
    std::string host = "127.0.0.1";
    const auto listen = std::find(extra_args_.begin(), extra_args_.end(), "--listen");
    if (listen != extra_args_.end() && listen + 1 != extra_args_.end())
      host = listen[1].substr(0, listen[1].rfind(':'));
    return host + ":" + std::to_string(port_);
  }

  // A ferryd that died by itself, or that a sanitizer reported on, fails
  // the test with its log: the log's folder goes with this object, and a
  // client's "closed the connection" says nothing of why the server went.
  ~FerrydProcess() {
    bool died = false;
    int status = 0;
    if (pid_ > 0) {
      died = waitpid(pid_, &status, WNOHANG) == pid_ && !stopped_by_test_;
      if (!died) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
    const std::string text = log();
    const bool reported = text.find("ERROR: AddressSanitizer") != std::string::npos ||
                          text.find("ERROR: LeakSanitizer") != std::string::npos ||
                          text.find("runtime error:") != std::string::npos;
    if (died || reported) {
      ADD_FAILURE() << "ferryd " << (reported ? "reported a sanitizer error" : "died by itself") << " ("
                    << (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                          : "signal " + std::to_string(WTERMSIG(status)))
                    << "); its log:\n"
                    << text;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  FerrydProcess(const FerrydProcess&) = delete;
  FerrydProcess& operator=(const FerrydProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::filesystem::path token_file() const { return dir_ / "token"; }
  const std::filesystem::path& dir() const { return dir_; }

  std::string log() const {
    std::ifstream in(log_file_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Waits until the log contains `text`; false after `timeout`.
  bool wait_for_log(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    return wait_for_log_where([&](const std::string& log) { return log.find(text) != std::string::npos; }, timeout);
  }

  // Waits until ferryd has said it offers CUDA device `ordinal` ("1 GPU: cuda:0",
  // "2 GPUs: cuda:0, cuda:1"); false after `timeout`.
  bool wait_for_gpu(int ordinal, std::chrono::milliseconds timeout = gpu_start_timeout) const {
    const std::regex offered("\\b[0-9]+ GPUs?: (cuda:[0-9]+, )*cuda:" + std::to_string(ordinal) + "\\b");
    return wait_for_log_where([&](const std::string& log) { return std::regex_search(log, offered); }, timeout);
  }

  void signal(int signo) {
    if (signo != SIGHUP && signo != SIGSTOP && signo != SIGCONT && signo != 0) stopped_by_test_ = true;
    kill(pid_, signo);
  }

  // SIGSTOP, and returns once ferryd is stopped: kill() returns before it
  // is, and a request sent at once could still be answered. False if it
  // was not stopped within a second.
  bool pause() {
    signal(SIGSTOP);
    const auto state = [this] {
      std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
      std::string text;
      std::getline(stat, text);
      const auto close = text.rfind(')');
      return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
    };
    for (int i = 0; i < 500; ++i) {
      if (state() == 'T') return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }

  // The exit status, or 128 + signal; -1 after `timeout` (the process is then killed).
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  // ferryd writes its log from another process: reading it again every
  // 20 ms is the simplest wait that needs nothing from it.
  template <class Found>
  bool wait_for_log_where(Found found, std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (found(log())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  explicit FerrydProcess(std::optional<std::string> token) : dir_(make_temp_dir()) {
    port_file_ = dir_ / "port";
    log_file_ = dir_ / "ferryd.log";
    if (token) {
      std::ofstream(token_file()) << *token << '\n';
      chmod(token_file().c_str(), 0600);
    }
  }

  void start(std::uint16_t port) {
    std::error_code ec;
    std::filesystem::remove(port_file_, ec);
    stopped_by_test_ = false;
    spawn(server_args(port, token_file(), port_file_, extra_args_));
    wait_for_port();
  }

  void spawn(const std::vector<std::string>& args) {
    std::vector<std::string> argv{ferryd_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = spawn_logged(std::move(argv), log_file_);
  }

  // With GPUs (any --gpus but none) ferryd probes each before it listens.
  bool given_gpus() const {
    for (std::size_t i = 0; i < extra_args_.size(); ++i) {
      const std::string& a = extra_args_[i];
      if (a == "--gpus" && i + 1 < extra_args_.size()) return extra_args_[i + 1] != "none";
      if (a.starts_with("--gpus=")) return a != "--gpus=none";
    }
    return false;
  }

  void wait_for_port() {
    const auto deadline = std::chrono::steady_clock::now() +
                          (given_gpus() ? gpu_start_timeout : std::chrono::seconds(20));
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(port_file_);
      unsigned port = 0;
      if (in >> port && port != 0) {
        port_ = static_cast<std::uint16_t>(port);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("ferryd exited before listening:\n" + log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("ferryd did not write its port file in time:\n" + log());
  }

  std::filesystem::path dir_;
  std::filesystem::path port_file_;
  std::filesystem::path log_file_;
  std::vector<std::string> extra_args_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
  bool stopped_by_test_ = false;  // a signal that ends it was sent: its exit is no surprise
};

}  // namespace ferry::test
