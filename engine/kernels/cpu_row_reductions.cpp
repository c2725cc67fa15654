// Two reductions along rows for the CPU, each one pass where torch takes two or three: the tiled prefill's causal
// softmax (torch: masked_fill_ over the diagonal block, then softmax, each reading and writing the whole score
// tile) and greedy sampling's argmax (torch's max(dim) walks a [128, 16000] fp32 row block at ~1.7 G values/s here,
// ~1.2 ms a decode step). Arithmetic is fp32; a bf16 softmax is rounded once at the end, as torch's is.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

#include "cpu_float_rows.h"

// Row r of a [rows, keys] block may see keys [0, first + r]: the rest are set to 0.
template <typename T>
void causal_softmax_rows(T* x, int64_t blocks, int64_t rows, int64_t keys, int64_t first) {
  at::parallel_for(0, blocks * rows, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(keys);
    float* b = buf.data();
    for (int64_t i = begin; i < end; ++i) {
      T* row = x + i * keys;
      const int64_t n = std::min(keys, first + i % rows + 1);
      for (int64_t j = 0; j < n; ++j) b[j] = static_cast<float>(row[j]);
      float top = b[0];
      for (int64_t j = 1; j < n; ++j) top = std::max(top, b[j]);
      float sum = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        b[j] = std::exp(b[j] - top);
        sum += b[j];
      }
      const float inv = 1.f / sum;
      for (int64_t j = 0; j < n; ++j) b[j] *= inv;
      round_in_place<T>(b, n);
      narrow(b, row, n);
      std::fill(row + n, row + keys, static_cast<T>(0.f));
    }
  });
}

void causal_softmax_(at::Tensor scores, int64_t first) {
  TORCH_CHECK(scores.dim() == 3 && scores.is_contiguous(), "causal_softmax_: contiguous scores [B, rows, keys]");
  TORCH_CHECK(first >= 0, "causal_softmax_: the first row's last visible key must be a key (first >= 0)");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, scores.scalar_type(), "causal_softmax_", [&] {
    causal_softmax_rows<scalar_t>(scores.data_ptr<scalar_t>(), scores.size(0), scores.size(1), scores.size(2), first);
  });
}

// The first index of each row's largest value. A row is cut into chunks whose maxima vectorize; the first chunk
// holding the row's maximum is then searched for its first occurrence. Every comparison is between values of the
// row (never a sentinel), so rows of -inf (banned tokens) hold; NaN-free rows (-ffast-math assumes so).
template <typename T>
void argmax_rows(const T* x, int64_t* out, int64_t rows, int64_t cols) {
  constexpr int64_t CHUNK = 64;
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> tops((cols + CHUNK - 1) / CHUNK);
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * cols;
      for (int64_t c = 0, k = 0; c < cols; c += CHUNK, ++k) {
        const int64_t n = std::min(CHUNK, cols - c);
        float top = static_cast<float>(row[c]);
        for (int64_t j = 1; j < n; ++j) top = std::max(top, static_cast<float>(row[c + j]));
        tops[k] = top;
      }
      const float best = *std::max_element(tops.begin(), tops.end());
      int64_t k = 0;
      while (tops[k] != best) ++k;
      int64_t j = k * CHUNK;
      while (static_cast<float>(row[j]) != best) ++j;
      out[r] = j;
    }
  });
}

at::Tensor argmax_last(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) > 0, "argmax_last: [rows, cols] with cols > 0");
  const auto xc = x.contiguous();
  auto out = at::empty({xc.size(0)}, xc.options().dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "argmax_last", [&] {
    argmax_rows<scalar_t>(xc.const_data_ptr<scalar_t>(), out.data_ptr<int64_t>(), xc.size(0), xc.size(1));
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmbench_cpu, m) {
  m.def("causal_softmax_(Tensor(a!) scores, int first) -> ()");
  m.def("argmax_last(Tensor x) -> Tensor");
  m.impl("causal_softmax_", c10::DispatchKey::CPU, TORCH_FN(causal_softmax_));
  m.impl("argmax_last", c10::DispatchKey::CPU, TORCH_FN(argmax_last));
}
