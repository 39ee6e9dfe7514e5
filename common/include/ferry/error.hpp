// One exception hierarchy for all of Ferry. Catch ferry::Error for anything
// Ferry throws; catch a subclass when the remedy differs.
#pragma once

#include <cstddef>
#include <source_location>
#include <stdexcept>
#include <string>
#include <utility>

namespace ferry {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The API was used wrongly: a bad argument, a pointer the pool does not own,
// a double free. Thrown before anything runs; everything else keeps working.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Runtime-compiled CUDA source did not compile: what() names the kernel and
// holds the compiler's log, which log() gives alone.
class CompileError : public UsageError {
 public:
  CompileError(const std::string& what, std::string log) : UsageError(what), log_(std::move(log)) {}
  const std::string& log() const noexcept { return log_; }

 private:
  std::string log_;
};

// A memory request could not be met. The message names the request and the
// state of the resource that refused it.
class OutOfMemory : public Error {
 public:
  OutOfMemory(const std::string& what, std::size_t requested_bytes)
      : Error(what), requested_bytes_(requested_bytes) {}
  std::size_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::size_t requested_bytes_;
};

// A task's kernel failed, or the task did not run because a task it depends
// on failed. The message names the task and its kernel.
class KernelError : public Error {
 public:
  using Error::Error;
};

// A message from a peer could not be decoded or broke the protocol's rules.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// A UCX call failed, or a connection broke; carries the ucs_status_t value.
class UcxError : public Error {
 public:
  UcxError(const std::string& what, int status) : Error(what), status_(status) {}
  int status() const noexcept { return status_; }

 private:
  int status_;
};

// A remote host refused or failed a request, or went away.
class RemoteError : public Error {
 public:
  using Error::Error;
};

// A CUDA runtime call failed; carries the cudaError_t value and where it happened.
class CudaError : public Error {
 public:
  CudaError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// A failed system call, with errno's text and the call site.
[[noreturn]] void throw_system_error(const char* call, int err,
                                     std::source_location where = std::source_location::current());

}  // namespace ferry
