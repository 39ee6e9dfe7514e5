// The fused elementwise kernels fused0 ... fused8 (by their number of
// inputs): one postfix program (fused_program.hpp) evaluated in one pass over
// memory, block by block, so a chain of NumPy-style operations reads its
// inputs once and writes its result once. ferry.numpy emits the programs.
//
// Not chunkable: a program's strides describe whole tiles (broadcast inputs
// are smaller than y), so splitting y's rows alone would misalign them;
// ferry.numpy's tiles are the units of parallel work instead.
#include <fmt/format.h>

#include <array>
#include <complex>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cpu/support.hpp"
#include "fused_ops.hpp"
#include "fused_program.hpp"

namespace ferry::kernels {
namespace {

using fused::Fold;
using fused::Instr;
using fused::Op;
using fused::Program;

constexpr std::size_t block = 1024;  // elements: a few registers of this fit in L1

bool computes(Op op) { return op != Op::load && op != Op::constant && op != Op::index; }

// Adjacent dimensions every operand walks as one are merged, so the inner
// loop runs as long as it can. Positions (index) need the dimensions as given.
void collapse(Program& p) {
  for (const Instr& in : p.code) {
    if (in.op == Op::index) return;
  }
  std::vector<std::size_t> dims{p.dims.back()};
  std::vector<std::vector<std::int64_t>> strides;
  for (const auto& s : p.strides) strides.push_back({s.back()});
  std::vector<std::int64_t> ys{p.y_strides.back()};
  for (std::size_t d = p.dims.size() - 1; d-- > 0;) {
    const auto n = static_cast<std::int64_t>(dims.front());
    bool merge = p.dims[d] == 1;
    if (!merge) {
      merge = p.y_strides[d] == ys.front() * n;
      for (std::size_t k = 0; k < strides.size() && merge; ++k) merge = p.strides[k][d] == strides[k].front() * n;
    }
    if (merge) {
      dims.front() *= p.dims[d];
      continue;
    }
    dims.insert(dims.begin(), p.dims[d]);
    for (std::size_t k = 0; k < strides.size(); ++k) strides[k].insert(strides[k].begin(), p.strides[k][d]);
    ys.insert(ys.begin(), p.y_strides[d]);
  }
  p.dims = std::move(dims);
  p.strides = std::move(strides);
  p.y_strides = std::move(ys);
  p.offsets.assign(p.dims.size(), 0);
}

void require_within(const Program& p, const std::vector<std::int64_t>& strides, const BufferArg& b, const char* what,
                    std::size_t k) {
  if (!b.contiguous()) throw UsageError(fmt::format("{}{} must be contiguous", what, k));
  if (p.elements() == 0) return;
  std::int64_t last = 0;
  for (std::size_t d = 0; d < p.dims.size(); ++d) {
    if (strides[d] < 0) throw UsageError(fmt::format("{}{}: negative strides are not supported", what, k));
    last += static_cast<std::int64_t>(p.dims[d] - 1) * strides[d];
  }
  if (static_cast<std::size_t>(last) >= b.elements())
    throw UsageError(fmt::format("{}{} holds {} elements but the program reaches element {}", what, k, b.elements(),
                                 last));
}

Program checked_program(const KernelArgs& args, std::size_t inputs) {
  std::vector<DType> types;
  for (std::size_t k = 0; k < inputs; ++k) types.push_back(args.buffer(1 + k).dtype);
  Program p = fused::parse(args.text(1 + inputs), types);
  for (std::size_t k = 0; k < inputs; ++k) require_within(p, p.strides[k], args.buffer(1 + k), "x", k);
  require_within(p, p.y_strides, args.buffer(0), "y", 0);
  return p;
}

void splat(void* dst, const void* src, std::size_t size, std::size_t n) {
  switch (size) {
    case 1: std::memset(dst, *static_cast<const unsigned char*>(src), n); return;
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, src, 2);
      auto* o = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = v;
      return;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, src, 4);
      auto* o = static_cast<std::uint32_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = v;
      return;
    }
    case 16: {
      std::array<std::uint64_t, 2> v;
      std::memcpy(v.data(), src, 16);
      auto* o = static_cast<std::array<std::uint64_t, 2>*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = v;
      return;
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, src, 8);
      auto* o = static_cast<std::uint64_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = v;
    }
  }
}

void fill_constant(const Instr& in, double* out) {
  const auto fill = [&](auto value) {
    auto* o = reinterpret_cast<decltype(value)*>(out);
    for (std::size_t i = 0; i < block; ++i) o[i] = value;
  };
  switch (in.type) {
    case DType::f32: return fill(static_cast<float>(in.value));
    case DType::f64: return fill(in.value);
    case DType::i32: return fill(static_cast<std::int32_t>(in.ivalue));
    case DType::i64: return fill(in.ivalue);
    case DType::u8: return fill(static_cast<std::uint8_t>(in.ivalue));
    case DType::i8: return fill(static_cast<std::int8_t>(in.ivalue));
    case DType::i16: return fill(static_cast<std::int16_t>(in.ivalue));
    case DType::u16: return fill(static_cast<std::uint16_t>(in.ivalue));
    case DType::u32: return fill(static_cast<std::uint32_t>(in.ivalue));
    case DType::u64: return fill(static_cast<std::uint64_t>(in.ivalue));
    case DType::b8: return fill(in.ivalue != 0);
    case DType::c64: return fill(std::complex<float>(static_cast<float>(in.value), static_cast<float>(in.imag)));
    case DType::c128: return fill(std::complex<double>(in.value, in.imag));
  }
}

// Rows shorter than half a block, each input whole rows, broadcast rows,
// broadcast columns or one value, y stored row after row: blocks can hold
// whole rows (see execute).
bool packs_rows(const Program& p) {
  if (p.dims.size() != 2 || p.dims[1] > block / 2 || p.fold != Fold::none) return false;
  const auto cols = static_cast<std::int64_t>(p.dims[1]);
  if (p.y_strides[0] != cols || p.y_strides[1] != 1) return false;
  for (const Instr& in : p.code) {
    if (in.op == Op::index) return false;
  }
  for (const auto& s : p.strides) {
    const bool rows = s[1] == 1 && (s[0] == cols || s[0] == 0);
    if (!rows && s[1] != 0) return false;
  }
  return true;
}

void execute(Program p, const std::vector<const BufferArg*>& xs, const BufferArg& y) {
  collapse(p);
  const std::size_t rank = p.dims.size(), inner = p.dims.back();
  const std::size_t ysize = size_of(y.dtype);
  const fused::FoldFn fold = p.fold == Fold::none ? nullptr : fused::fold_fn(p.fold, y.dtype, p.y_strides.back() == 0);
  if (p.fold != Fold::none && fold == nullptr)
    throw UsageError(fmt::format("fused program: y of {} cannot fold with min or max", to_string(y.dtype)));
  if (p.fold != Fold::none) fused::fill_identity(p.fold, y.dtype, y.data, y.elements());
  if (p.elements() == 0) return;

  // A register per stack position, one for converting the result, and a
  // spare: an instruction writes the spare and swaps it with its slot's, as
  // a result wider than its operand (a cast, where's choice over a bool
  // condition) would overwrite operand elements not yet read.
  // Two doubles per element: the widest type, complex128, fits.
  std::vector<double> scratch((p.depth + 2) * block * 2);
  const auto reg = [&](std::size_t slot) { return static_cast<void*>(scratch.data() + slot * block * 2); };
  std::vector<void*> store(p.depth);
  for (std::size_t s = 0; s < p.depth; ++s) store[s] = reg(s);
  void* spare = reg(p.depth + 1);
  std::vector<std::vector<double>> constants(p.code.size());
  std::vector<fused::OpFn> fns(p.code.size(), nullptr);
  for (std::size_t k = 0; k < p.code.size(); ++k) {
    const Instr& in = p.code[k];
    if (in.op == Op::constant) {
      constants[k].resize(block * 2);
      fill_constant(in, constants[k].data());
    } else if (computes(in.op)) {
      fns[k] = fused::resolve(in);
    }
  }
  const Instr& last = p.code.back();
  const bool direct = p.fold == Fold::none && computes(last.op) && last.type == y.dtype;
  const fused::OpFn to_y = p.result != y.dtype ? fused::cast_fn(p.result, y.dtype) : nullptr;

  std::array<const void*, fused::max_depth> ptr{};
  // One block of n elements: load(j, s) gives input j's block (filling
  // store[s] where it must), position(d, s) the positions along d.
  const auto run_block = [&](std::size_t n, char* ydst, auto&& load, auto&& position) {
    for (std::size_t k = 0; k < p.code.size(); ++k) {
      const Instr& in = p.code[k];
      const std::size_t s = in.slot;
      switch (in.op) {
        case Op::load: ptr[s] = load(static_cast<std::size_t>(in.imm), s, n); break;
        case Op::constant: ptr[s] = constants[k].data(); break;
        case Op::index: ptr[s] = position(static_cast<std::size_t>(in.imm), s, n); break;
        default:
          if (direct && k + 1 == p.code.size()) {
            fns[k](ydst, &ptr[s], n, in);
            ptr[s] = ydst;
          } else {
            fns[k](spare, &ptr[s], n, in);
            ptr[s] = spare;
            std::swap(spare, store[s]);
          }
      }
    }
    const void* value = ptr[0];
    if (to_y != nullptr) {
      to_y(reg(p.depth), &ptr[0], n, last);
      value = reg(p.depth);
    }
    if (fold != nullptr) fold(ydst, value, n);
    else if (!direct) std::memcpy(ydst, value, n * ysize);
  };
  const auto element = [&](std::size_t j, std::int64_t at) {
    return static_cast<const char*>(xs[j]->data) + at * static_cast<std::int64_t>(size_of(xs[j]->dtype));
  };

  if (packs_rows(p)) {
    // Short rows (x - x.mean(axis=0) on a few columns): a block holds whole
    // rows, row-broadcast inputs are their row repeated once per call, and
    // column-broadcast ones are spread per block.
    const std::size_t cols = inner, per = block / cols;
    std::vector<std::vector<char>> repeated(xs.size());
    for (std::size_t j = 0; j < xs.size(); ++j) {
      if (p.strides[j][0] != 0 || p.strides[j][1] != 1) continue;
      const std::size_t row_bytes = cols * size_of(xs[j]->dtype);
      repeated[j].resize(per * row_bytes);
      for (std::size_t r = 0; r < per; ++r) std::memcpy(repeated[j].data() + r * row_bytes, xs[j]->data, row_bytes);
    }
    for (std::size_t r0 = 0; r0 < p.dims[0]; r0 += per) {
      const std::size_t rows = std::min(per, p.dims[0] - r0);
      const auto load = [&](std::size_t j, std::size_t s, std::size_t) -> const void* {
        const std::int64_t s0 = p.strides[j][0];
        if (p.strides[j][1] == 1) {
          return s0 == 0 ? static_cast<const void*>(repeated[j].data())
                         : element(j, static_cast<std::int64_t>(r0 * cols));
        }
        const std::size_t size = size_of(xs[j]->dtype);
        char* o = static_cast<char*>(store[s]);
        for (std::size_t i = 0; i < rows; ++i)
          splat(o + i * cols * size, element(j, s0 * static_cast<std::int64_t>(r0 + i)), size, cols);
        return o;
      };
      const auto no_position = [](std::size_t, std::size_t, std::size_t) -> const void* { return nullptr; };
      run_block(rows * cols, static_cast<char*>(y.data) + r0 * cols * ysize, load, no_position);
    }
    return;
  }

  std::vector<std::size_t> idx(rank, 0);  // the outer position; idx[rank - 1] stays 0
  std::vector<std::int64_t> off(xs.size());
  for (;;) {
    std::int64_t yoff = 0;
    for (std::size_t d = 0; d + 1 < rank; ++d) yoff += static_cast<std::int64_t>(idx[d]) * p.y_strides[d];
    for (std::size_t k = 0; k < xs.size(); ++k) {
      off[k] = 0;
      for (std::size_t d = 0; d + 1 < rank; ++d) off[k] += static_cast<std::int64_t>(idx[d]) * p.strides[k][d];
    }
    for (std::size_t start = 0; start < inner; start += block) {
      const std::size_t n = std::min(block, inner - start);
      char* ydst = static_cast<char*>(y.data) +
                   (yoff + static_cast<std::int64_t>(start) * p.y_strides.back()) * static_cast<std::int64_t>(ysize);
      const auto load = [&](std::size_t j, std::size_t s, std::size_t count) -> const void* {
        const std::int64_t stride = p.strides[j].back();
        const char* src = element(j, off[j] + static_cast<std::int64_t>(start) * stride);
        if (stride == 1) return src;
        splat(store[s], src, size_of(xs[j]->dtype), count);
        return store[s];
      };
      const auto position = [&](std::size_t d, std::size_t s, std::size_t count) -> const void* {
        auto* o = static_cast<std::int64_t*>(store[s]);
        const bool innermost = d + 1 == rank;
        const std::int64_t base = p.offsets[d] + static_cast<std::int64_t>(innermost ? start : idx[d]);
        for (std::size_t i = 0; i < count; ++i) o[i] = base + (innermost ? static_cast<std::int64_t>(i) : 0);
        return o;
      };
      run_block(n, ydst, load, position);
    }
    // The next outer position, last dimension but one fastest.
    std::size_t d = rank - 1;
    while (d-- > 0) {
      if (++idx[d] < p.dims[d]) break;
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) break;
  }
}

KernelDef make_fused(std::size_t inputs) {
  KernelDef k;
  k.name = fmt::format("fused{}", inputs);
  k.summary = fmt::format("y = a fused elementwise program over {} input{} (see docs/numpy.md)", inputs,
                          inputs == 1 ? "" : "s");
  const std::vector<DType> all(std::begin(all_dtypes), std::end(all_dtypes));
  k.params.push_back(buffer_param("y", AccessMode::write, all));
  for (std::size_t i = 0; i < inputs; ++i) k.params.push_back(buffer_param(fmt::format("x{}", i), AccessMode::read, all));
  k.params.push_back(text_param("program"));
  k.validate = [inputs](const KernelArgs& args) { checked_program(args, inputs); };
  k.cost = [inputs](const KernelArgs& args) {
    const Program p = checked_program(args, inputs);
    return Cost{static_cast<double>(p.elements() * p.code.size()), total_bytes(args, inputs + 1)};
  };
  k.cpu = [inputs](ExecContext& ctx) {
    const Program p = checked_program(ctx.args, inputs);
    std::vector<const BufferArg*> xs;
    for (std::size_t i = 0; i < inputs; ++i) xs.push_back(&ctx.args.buffer(1 + i));
    execute(p, xs, ctx.args.buffer(0));
  };
  return k;
}

}  // namespace

void register_fused_kernels(KernelRegistry& registry) {
  for (std::size_t inputs = 0; inputs <= fused::max_inputs; ++inputs) registry.add(make_fused(inputs));
}

}  // namespace ferry::kernels
