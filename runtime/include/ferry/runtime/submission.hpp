// What rt.submit(...) turns its arguments into before anything runs:
// buffer accesses, scalars, and task options (placement, a name).
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/kernel.hpp"
#include "ferry/runtime/place.hpp"

namespace ferry {

// Task options, given among the arguments:
//   rt.submit("gemm", read(a), read(b), readwrite(c), ferry::on(ferry::cpu()), ferry::named("update"))
struct OnOption {
  Place place;
};
struct NameOption {
  std::string name;
};
inline OnOption on(Place place) { return {std::move(place)}; }
inline NameOption named(std::string name) { return {std::move(name)}; }

// One task argument assembled at run time: a buffer access or a scalar.
using TaskArg = std::variant<BufferAccess, ScalarValue>;

namespace detail {

using SubmitArg = TaskArg;

struct Submission {
  std::vector<SubmitArg> args;
  Place place;
  std::string name;
};

template <typename A>
void add_submit_arg(Submission& s, A&& arg) {
  using U = std::remove_cvref_t<A>;
  if constexpr (std::is_same_v<U, BufferAccess>) s.args.emplace_back(std::forward<A>(arg));
  else if constexpr (std::is_same_v<U, OnOption>) s.place = arg.place;
  else if constexpr (std::is_same_v<U, NameOption>) s.name = arg.name;
  // Built in place: moving a variant holding a string trips a false GCC 12 warning.
  else if constexpr (std::is_floating_point_v<U>) s.args.emplace_back(std::in_place_type<ScalarValue>, static_cast<double>(arg));
  else if constexpr (std::is_integral_v<U>)  // bool too: true is 1
    s.args.emplace_back(std::in_place_type<ScalarValue>, static_cast<std::int64_t>(arg));
  else if constexpr (std::is_convertible_v<A, std::string>)
    s.args.emplace_back(std::in_place_type<ScalarValue>, std::in_place_type<std::string>, std::string(arg));
  else if constexpr (std::is_base_of_v<BufferBase, U>)
    static_assert(sizeof(U) == 0, "say how the task uses this buffer: ferry::read(b), ferry::write(b) or ferry::readwrite(b)");
  else static_assert(sizeof(U) == 0, "task arguments are buffer accesses, numbers, strings, ferry::on() or ferry::named()");
}

template <typename... A>
Submission make_submission(A&&... args) {
  Submission s;
  s.args.reserve(sizeof...(A));
  (add_submit_arg(s, std::forward<A>(args)), ...);
  return s;
}

}  // namespace detail
}  // namespace ferry
