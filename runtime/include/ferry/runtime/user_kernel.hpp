// Kernels written as ordinary C++ callables. Parameter types say how each
// buffer is used, so dependencies and argument checks come from the signature:
//
//   auto scale = rt.kernel("scale", [](ferry::In<float> x, ferry::Out<float> y, float a) {
//     for (std::size_t i = 0; i < x.size(); ++i) y[i] = a * x[i];
//   });
//   rt.submit(scale, ferry::read(x), ferry::write(y), 2.0f);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ferry/runtime/host_view.hpp"
#include "ferry/runtime/kernel.hpp"

namespace ferry {

template <typename T>
struct In : HostView<const T> {
  using HostView<const T>::HostView;
};
template <typename T>
struct Out : HostView<T> {
  using HostView<T>::HostView;
};
template <typename T>
struct InOut : HostView<T> {
  using HostView<T>::HostView;
};

// A kernel known to one runtime (or the global registry), by definition.
struct KernelRef {
  std::shared_ptr<const KernelDef> def;
};

namespace detail {

template <typename T>
struct ParamTraits {
  using U = std::remove_cvref_t<T>;
  static_assert(std::is_arithmetic_v<U> || std::is_same_v<U, std::string>,
                "kernel parameters are ferry::In<T>, Out<T>, InOut<T>, numbers or std::string");
  static Param param(std::size_t index) {
    Param p;
    p.name = "arg" + std::to_string(index + 1);
    if constexpr (std::is_same_v<U, std::string>) p.kind = ParamKind::text;
    else if constexpr (std::is_floating_point_v<U>) p.kind = ParamKind::real;
    else p.kind = ParamKind::integer;
    return p;
  }
  static U get(const KernelArgs& args, std::size_t i) {
    if constexpr (std::is_same_v<U, std::string>) return args.text(i);
    else if constexpr (std::is_floating_point_v<U>) return static_cast<U>(args.real(i));
    else return static_cast<U>(args.integer(i));
  }
};

template <typename View, typename T, AccessMode Mode>
struct BufferParamTraits {
  static Param param(std::size_t index) {
    Param p;
    p.name = "arg" + std::to_string(index + 1);
    p.kind = ParamKind::buffer;
    p.mode = Mode;
    p.dtypes = {dtype_of<T>()};
    return p;
  }
  static View get(const KernelArgs& args, std::size_t i) {
    const BufferArg& b = args.buffer(i);
    return View(static_cast<decltype(std::declval<const View&>().data())>(b.data), b.rows, b.cols, b.ld);
  }
};
template <typename T>
struct ParamTraits<In<T>> : BufferParamTraits<In<T>, T, AccessMode::read> {};
template <typename T>
struct ParamTraits<Out<T>> : BufferParamTraits<Out<T>, T, AccessMode::write> {};
template <typename T>
struct ParamTraits<InOut<T>> : BufferParamTraits<InOut<T>, T, AccessMode::readwrite> {};

template <typename F>
struct CallableTraits : CallableTraits<decltype(&std::remove_cvref_t<F>::operator())> {};
template <typename R, typename... A>
struct CallableTraits<R (*)(A...)> {
  using Result = R;
  using Args = std::tuple<std::remove_cvref_t<A>...>;
};
template <typename R, typename C, typename... A>
struct CallableTraits<R (C::*)(A...) const> : CallableTraits<R (*)(A...)> {};
template <typename R, typename C, typename... A>
struct CallableTraits<R (C::*)(A...)> : CallableTraits<R (*)(A...)> {};

template <typename F, typename Tuple, std::size_t... I>
decltype(auto) invoke_with_args(F& f, const KernelArgs& args, std::index_sequence<I...>) {
  return f(ParamTraits<std::tuple_element_t<I, Tuple>>::get(args, I)...);
}

}  // namespace detail

// Builds a CPU kernel definition from a callable; `cost` seeds the
// performance model (optional). A callable returning a number gives the task
// a scalar result (Task::result()).
template <typename F>
KernelDef make_kernel(std::string name, F callable, std::function<Cost(const KernelArgs&)> cost = {}) {
  using Args = typename detail::CallableTraits<F>::Args;
  using Result = typename detail::CallableTraits<F>::Result;
  static_assert(std::is_void_v<Result> || std::is_arithmetic_v<Result>, "a kernel returns nothing or a number");
  constexpr std::size_t n = std::tuple_size_v<Args>;
  KernelDef def;
  def.name = std::move(name);
  def.summary = "user kernel";
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (def.params.push_back(detail::ParamTraits<std::tuple_element_t<I, Args>>::param(I)), ...);
  }(std::make_index_sequence<n>{});
  def.cost = std::move(cost);
  def.returns_scalar = !std::is_void_v<Result>;
  auto shared = std::make_shared<F>(std::move(callable));
  def.cpu = [shared](ExecContext& ctx) {
    if constexpr (std::is_void_v<Result>) {
      detail::invoke_with_args<F, Args>(*shared, ctx.args, std::make_index_sequence<n>{});
    } else {
      ctx.result = static_cast<double>(detail::invoke_with_args<F, Args>(*shared, ctx.args, std::make_index_sequence<n>{}));
    }
  };
  return def;
}

}  // namespace ferry
