// Argument checking at submission: everything a user can get wrong is
// reported here, naming task, kernel and argument, before anything runs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "base/task_label.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry {
namespace {

const char* kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::buffer: return "a buffer";
    case ParamKind::real: return "a real number";
    case ParamKind::integer: return "an integer";
    case ParamKind::text: return "a string";
  }
  return "?";
}

// The spelling of the API call that declares the access, for suggestions.
const char* access_call(AccessMode mode) {
  switch (mode) {
    case AccessMode::read: return "read";
    case AccessMode::write: return "write";
    case AccessMode::readwrite: return "readwrite";
  }
  return "?";
}

std::string describe(const ScalarValue& value) {
  if (const auto* d = std::get_if<double>(&value)) return fmt::format("the real number {}", *d);
  if (const auto* i = std::get_if<std::int64_t>(&value)) return fmt::format("the integer {}", *i);
  return fmt::format("the string \"{}\"", std::get<std::string>(value));
}

std::string describe(const Arg& arg) {
  const auto* scalar = std::get_if<ScalarValue>(&arg);
  return scalar == nullptr ? std::string("a buffer") : describe(*scalar);
}

std::string show_default(const ScalarValue& value) {
  if (const auto* d = std::get_if<double>(&value)) return fmt::format("{}", *d);
  if (const auto* i = std::get_if<std::int64_t>(&value)) return fmt::format("{}", *i);
  return fmt::format("\"{}\"", std::get<std::string>(value));
}

std::string signature(const KernelDef& kernel) {
  std::string out = kernel.name + "(";
  for (std::size_t i = 0; i < kernel.params.size(); ++i) {
    const Param& p = kernel.params[i];
    if (i > 0) out += ", ";
    out += p.name;
    if (p.default_value) out += " = " + show_default(*p.default_value);
  }
  return out + ")";
}

std::string prefix(const KernelDef& kernel, std::string_view task_name) {
  if (task_name.empty()) return fmt::format("kernel {}: ", kernel.name);
  return detail::task_label(task_name, kernel.name) + ": ";
}

std::string argument(std::size_t index, const Param& param) {
  return fmt::format("argument {} '{}'", index + 1, param.name);
}

// Returns an empty string when the buffer fits the parameter.
std::string check_buffer(const BufferArg& buffer, const Param& param, std::size_t index) {
  if (reads(param.mode) && !reads(buffer.mode)) {
    return fmt::format("{} is read by the kernel but passed as {}; pass ferry::{}({})", argument(index, param),
                       access_call(buffer.mode), access_call(param.mode), param.name);
  }
  if (writes(param.mode) && !writes(buffer.mode)) {
    return fmt::format("{} is written by the kernel but passed as {}; pass ferry::{}({})", argument(index, param),
                       access_call(buffer.mode), access_call(param.mode), param.name);
  }
  if (!param.dtypes.empty() && std::find(param.dtypes.begin(), param.dtypes.end(), buffer.dtype) == param.dtypes.end()) {
    std::string accepted;
    for (DType t : param.dtypes) accepted += (accepted.empty() ? "" : ", ") + std::string(to_string(t));
    return fmt::format("{} has element type {}; the kernel accepts {}", argument(index, param), to_string(buffer.dtype),
                       accepted);
  }
  if (buffer.rows > 1 && buffer.ld < buffer.cols) {
    return fmt::format("{} is a {} x {} view with rows only {} elements apart", argument(index, param), buffer.rows,
                       buffer.cols, buffer.ld);
  }
  return {};
}

// Converts between the numeric kinds where no value is lost; returns an
// empty string on success.
std::string check_scalar(ScalarValue& value, const Param& param, std::size_t index) {
  const auto mismatch = [&] {
    return fmt::format("{} must be {}, got {}", argument(index, param), kind_name(param.kind), describe(value));
  };
  switch (param.kind) {
    case ParamKind::real:
      if (const auto* i = std::get_if<std::int64_t>(&value)) value = static_cast<double>(*i);
      return std::holds_alternative<double>(value) ? std::string() : mismatch();
    case ParamKind::integer:
      if (const auto* d = std::get_if<double>(&value)) {
        // 2^63 is exactly representable; anything at or above it is not an int64.
        if (std::trunc(*d) != *d || *d < -9223372036854775808.0 || *d >= 9223372036854775808.0) return mismatch();
        value = static_cast<std::int64_t>(*d);
      }
      return std::holds_alternative<std::int64_t>(value) ? std::string() : mismatch();
    case ParamKind::text:
      return std::holds_alternative<std::string>(value) ? std::string() : mismatch();
    case ParamKind::buffer: break;
  }
  return mismatch();
}

[[noreturn]] void wrong_kind(std::size_t i, const char* want, const Arg& arg) {
  throw Error(fmt::format("kernel bug: argument {} read as {} but it is {}", i + 1, want, describe(arg)));
}

}  // namespace

const BufferArg& KernelArgs::buffer(std::size_t i) const {
  if (i >= items.size()) throw Error(fmt::format("kernel bug: argument {} read but only {} given", i + 1, items.size()));
  const auto* buffer = std::get_if<BufferArg>(&items[i]);
  if (buffer == nullptr) wrong_kind(i, "a buffer", items[i]);
  return *buffer;
}

double KernelArgs::real(std::size_t i) const {
  if (i >= items.size()) throw Error(fmt::format("kernel bug: argument {} read but only {} given", i + 1, items.size()));
  const Arg& arg = items[i];
  if (const auto* scalar = std::get_if<ScalarValue>(&arg)) {
    if (const auto* d = std::get_if<double>(scalar)) return *d;
    if (const auto* n = std::get_if<std::int64_t>(scalar)) return static_cast<double>(*n);
  }
  wrong_kind(i, "a real number", arg);
}

std::int64_t KernelArgs::integer(std::size_t i) const {
  if (i >= items.size()) throw Error(fmt::format("kernel bug: argument {} read but only {} given", i + 1, items.size()));
  const Arg& arg = items[i];
  if (const auto* scalar = std::get_if<ScalarValue>(&arg)) {
    if (const auto* n = std::get_if<std::int64_t>(scalar)) return *n;
  }
  wrong_kind(i, "an integer", arg);
}

const std::string& KernelArgs::text(std::size_t i) const {
  if (i >= items.size()) throw Error(fmt::format("kernel bug: argument {} read but only {} given", i + 1, items.size()));
  const Arg& arg = items[i];
  if (const auto* scalar = std::get_if<ScalarValue>(&arg)) {
    if (const auto* s = std::get_if<std::string>(scalar)) return *s;
  }
  wrong_kind(i, "a string", arg);
}

void check_arguments(const KernelDef& kernel, KernelArgs& args, std::string_view task_name) {
  const auto fail = [&](const std::string& what) { throw UsageError(prefix(kernel, task_name) + what); };
  const std::size_t expected = kernel.params.size();
  if (args.size() > expected) {
    fail(fmt::format("takes {} argument{}, {}, but got {}", expected, expected == 1 ? "" : "s", signature(kernel),
                     args.size()));
  }
  for (std::size_t i = args.size(); i < expected; ++i) {
    const Param& param = kernel.params[i];
    if (!param.default_value) fail(fmt::format("{} is missing; the kernel takes {}", argument(i, param), signature(kernel)));
    args.items.emplace_back(*param.default_value);
  }

  for (std::size_t i = 0; i < expected; ++i) {
    const Param& param = kernel.params[i];
    Arg& arg = args.items[i];
    const bool wants_buffer = param.kind == ParamKind::buffer;
    if (wants_buffer != std::holds_alternative<BufferArg>(arg)) {
      fail(fmt::format("{} must be {}, got {}", argument(i, param), kind_name(param.kind), describe(arg)));
    }
    const std::string problem = wants_buffer ? check_buffer(std::get<BufferArg>(arg), param, i)
                                             : check_scalar(std::get<ScalarValue>(arg), param, i);
    if (!problem.empty()) fail(problem);
  }

  if (kernel.validate) {
    try {
      kernel.validate(args);
    } catch (const UsageError& e) {
      fail(e.what());
    }
  }
}

}  // namespace ferry
