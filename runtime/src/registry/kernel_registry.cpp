// The kernel registry: looked up on every submission (shared lock), written
// only when built-ins or plugins register (exclusive lock).
#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "builtin.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry {
namespace {

bool default_fits(const Param& param) {
  const ScalarValue& value = *param.default_value;
  switch (param.kind) {
    case ParamKind::real: return !std::holds_alternative<std::string>(value);
    case ParamKind::integer: return std::holds_alternative<std::int64_t>(value);
    case ParamKind::text: return std::holds_alternative<std::string>(value);
    case ParamKind::buffer: return false;
  }
  return false;
}

// Catches a malformed parameter list when a plugin registers, not when a
// user first calls the kernel.
void check_params(const KernelDef& def) {
  bool defaults_started = false;
  for (const Param& param : def.params) {
    if (param.name.empty()) throw UsageError(fmt::format("kernel '{}': every parameter needs a name", def.name));
    if (param.default_value) {
      if (!default_fits(param)) {
        throw UsageError(fmt::format("kernel '{}': the default of parameter '{}' does not match its kind", def.name,
                                     param.name));
      }
      defaults_started = true;
    } else if (defaults_started) {
      throw UsageError(fmt::format(
          "kernel '{}': parameter '{}' has no default but follows one that has; only trailing parameters may be left out",
          def.name, param.name));
    }
  }
}

// Without a hint the performance model still learns from the bytes moved.
Cost bytes_only(const KernelArgs& args) {
  Cost cost;
  for (const Arg& arg : args.items) {
    if (const auto* b = std::get_if<BufferArg>(&arg)) cost.bytes += static_cast<double>(b->bytes());
  }
  return cost;
}

std::mutex registration_errors_mutex;
std::vector<std::string>& registration_errors() {
  static std::vector<std::string> errors;
  return errors;
}

}  // namespace

struct KernelRegistry::Impl {
  mutable std::shared_mutex mutex;
  // Nodes never move, so the pointers find() hands out stay valid.
  std::map<std::string, std::unique_ptr<const KernelDef>, std::less<>> kernels;
};

KernelRegistry::KernelRegistry() : impl_(std::make_unique<Impl>()) {}
KernelRegistry::~KernelRegistry() = default;

KernelRegistry& KernelRegistry::global() {
  // Never destroyed: tasks and other statics may still look kernels up
  // while the process shuts down.
  static KernelRegistry* const instance = [] {
    auto registry = std::make_unique<KernelRegistry>();
    detail::register_builtin_kernels(*registry);
    return registry.release();
  }();
  return *instance;
}

void KernelRegistry::add(KernelDef def) {
  if (def.name.empty()) throw UsageError("kernel registry: a kernel needs a name");
  if (!def.cpu && !def.cuda) {
    throw UsageError(fmt::format("kernel '{}' has neither a cpu nor a cuda implementation", def.name));
  }
  check_params(def);
  if (!def.cost) def.cost = bytes_only;
  std::string name = def.name;
  std::unique_lock lock(impl_->mutex);
  auto [it, inserted] = impl_->kernels.try_emplace(std::move(name));
  if (!inserted) throw UsageError(fmt::format("kernel '{}' is already registered", it->first));
  it->second = std::make_unique<const KernelDef>(std::move(def));
}

const KernelDef* KernelRegistry::find(std::string_view name) const {
  std::shared_lock lock(impl_->mutex);
  auto it = impl_->kernels.find(name);
  return it == impl_->kernels.end() ? nullptr : it->second.get();
}

// Sorted (the map's order): load_plugin() diffs two listings.
std::vector<std::string> KernelRegistry::names() const {
  std::shared_lock lock(impl_->mutex);
  std::vector<std::string> out;
  out.reserve(impl_->kernels.size());
  for (const auto& entry : impl_->kernels) out.push_back(entry.first);
  return out;
}

namespace detail {

KernelRegistration::KernelRegistration(KernelDef (*make)()) noexcept {
  try {
    KernelRegistry::global().add(make());
  } catch (const std::exception& e) {
    std::lock_guard lock(registration_errors_mutex);
    registration_errors().emplace_back(e.what());
  } catch (...) {
    std::lock_guard lock(registration_errors_mutex);
    registration_errors().emplace_back("a kernel registration threw something that is not a std::exception");
  }
}

std::vector<std::string> take_registration_errors() {
  std::lock_guard lock(registration_errors_mutex);
  return std::exchange(registration_errors(), {});
}

}  // namespace detail
}  // namespace ferry
