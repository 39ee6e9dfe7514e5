// The chaos harness's second client: numpy_pipeline.py, a ferry.numpy
// pipeline in a Python process of its own, run on the pool beside the mixed
// DAG so that a fault meets both. It checks itself against its CPU-only
// result and answers one line per run (see the script).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::chaos {

class NumpyClient {
 public:
  // Starts `python script --remotes ... --token-file ...` and waits for its
  // "ready" (the CPU reference computed). Throws if it does not start.
  NumpyClient(const std::string& python, const std::string& script, const std::vector<std::string>& remotes,
              const std::string& token_file, double liveness_s) {
    std::string joined;
    for (const auto& r : remotes) joined += (joined.empty() ? "" : ",") + r;
    std::vector<std::string> argv{python,       script,     "--remotes", joined, "--token-file",
                                  token_file,   "--liveness", std::to_string(liveness_s)};
    std::vector<char*> c;  // made before the fork: the child only dups and execs
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("numpy client: pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("numpy client: fork failed");
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[0]), ::close(in[1]), ::close(out[0]), ::close(out[1]);
      ::execv(c[0], c.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = ::fdopen(in[1], "w");
    from_ = ::fdopen(out[0], "r");
    const std::string first = line();
    if (first != "ready") throw std::runtime_error("numpy client: " + python + " " + script + " said '" + first + "'");
  }
  ~NumpyClient() {
    if (to_ != nullptr) std::fclose(to_);  // end of input: the script exits
    if (from_ != nullptr) std::fclose(from_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  NumpyClient(const NumpyClient&) = delete;
  NumpyClient& operator=(const NumpyClient&) = delete;

  pid_t pid() const { return pid_; }
  // Starts one run of the pipeline on the pool, and returns once its
  // runtime dialled the pool; result() reads its answer.
  void start() {
    std::fputs("run\n", to_);
    std::fflush(to_);
    connected_ = line();
  }
  // "ok SECONDS TASKS_ON_THE_POOL", "wrong ..." or "error ...".
  std::string result() { return connected_ == "connected" ? line() : "error: " + connected_; }

 private:
  std::string line() {
    std::string s;
    for (int c; (c = std::fgetc(from_)) != EOF && c != '\n';) s.push_back(static_cast<char>(c));
    return s.empty() ? "error: the pipeline's process ended" : s;
  }

  std::string connected_;
  pid_t pid_ = -1;
  std::FILE* to_ = nullptr;
  std::FILE* from_ = nullptr;
};

}  // namespace ferry::chaos
