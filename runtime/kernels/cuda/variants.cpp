#include "cuda/variants.hpp"

#include <map>

namespace ferry::kernels::cuda {

KernelFn variant(std::string_view name) {
  static const std::map<std::string_view, void (*)(ExecContext&)> variants{
      {"axpy", axpy}, {"scal", scal},   {"dot", dot},     {"nrm2", nrm2}, {"gemm", gemm}, {"trsm", trsm},
      {"syrk", syrk}, {"potrf", potrf}, {"fill", fill},   {"copy", copy}, {"map", map},   {"sum", sum},
      {"gesdd", gesdd}, {"syevd", syevd}, {"geqrf", geqrf}};
  const auto it = variants.find(name);
  return it == variants.end() ? KernelFn{} : KernelFn{it->second};
}

}  // namespace ferry::kernels::cuda
