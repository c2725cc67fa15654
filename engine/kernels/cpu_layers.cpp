// The elementwise layers of a Llama block for the CPU, each one pass over its rows: RMSNorm, rotary embedding
// (in place on q and k) and SiLU(gate) * up. torch runs each as five to eight separate ops, every one reading and
// writing the whole activation (a bf16 decode step at batch 256 spent ~0.9 ms a layer in them against ~0.25 ms
// here); vLLM-CPU has the same three as custom ops. Arithmetic is fp32 and each result is rounded to the
// activation's dtype where torch's ops round it, so bf16 outputs match the torch path's to the last bit or one.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>


namespace {

#include "cpu_float_rows.h"


// One row b (fp32 scratch of x's values) -> weight * dtype(b * rsqrt(mean(b^2) + eps)), rounded as the reference
// RMSNorm rounds it, in place.
template <typename T>
inline void normalize(float* b, const float* wf, int64_t hidden, float eps) {
  float sum = 0.f;
  for (int64_t i = 0; i < hidden; ++i) sum += b[i] * b[i];
  const float inv = 1.f / std::sqrt(sum / hidden + eps);
  for (int64_t i = 0; i < hidden; ++i) b[i] *= inv;
  round_in_place<T>(b, hidden);
  for (int64_t i = 0; i < hidden; ++i) b[i] *= wf[i];
  round_in_place<T>(b, hidden);
}

// Rows of x [T, H] -> their RMSNorm.
template <typename T>
void rms_norm_rows(const T* x, const T* w, T* out, int64_t rows, int64_t hidden, float eps) {
  std::vector<float> wf(hidden);
  widen(w, wf.data(), hidden);
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(hidden);
    float* b = buf.data();
    for (int64_t r = begin; r < end; ++r) {
      widen(x + r * hidden, b, hidden);
      normalize<T>(b, wf.data(), hidden, eps);
      narrow(b, out + r * hidden, hidden);
    }
  });
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == weight.scalar_type() && weight.is_contiguous() && weight.dim() == 1 &&
                  x.size(-1) == weight.size(0),
              "rms_norm: weight [H] of x's dtype");
  const auto xc = x.contiguous();
  auto out = at::empty_like(xc);
  const int64_t hidden = weight.size(0), rows = hidden ? xc.numel() / hidden : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm", [&] {
    rms_norm_rows<scalar_t>(xc.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
                            out.data_ptr<scalar_t>(), rows, hidden, static_cast<float>(eps));
  });
  return out;
}

// x [T, H] and residual [T, H], contiguous: residual <- dtype(x + residual), then x <- the RMSNorm of it, in place
// (vLLM's fused_add_rms_norm): one pass where torch's add and the norm each read and write the whole activation.
template <typename T>
void add_rms_norm_rows(T* x, T* res, const T* w, int64_t rows, int64_t hidden, float eps) {
  std::vector<float> wf(hidden);
  widen(w, wf.data(), hidden);
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(2 * hidden);
    float *a = buf.data(), *b = a + hidden;
    for (int64_t r = begin; r < end; ++r) {
      widen(x + r * hidden, a, hidden);
      widen(res + r * hidden, b, hidden);
      for (int64_t i = 0; i < hidden; ++i) b[i] += a[i];
      round_in_place<T>(b, hidden);
      narrow(b, res + r * hidden, hidden);
      normalize<T>(b, wf.data(), hidden, eps);
      narrow(b, x + r * hidden, hidden);
    }
  });
}

void add_rms_norm_(at::Tensor x, at::Tensor residual, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.is_contiguous() && residual.is_contiguous() && x.sizes() == residual.sizes() &&
                  x.scalar_type() == residual.scalar_type() && x.scalar_type() == weight.scalar_type() &&
                  weight.is_contiguous() && weight.dim() == 1 && x.size(-1) == weight.size(0),
              "add_rms_norm_: contiguous x and residual of one shape, weight [H], one dtype");
  const int64_t hidden = weight.size(0), rows = hidden ? x.numel() / hidden : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "add_rms_norm_", [&] {
    add_rms_norm_rows<scalar_t>(x.data_ptr<scalar_t>(), residual.data_ptr<scalar_t>(),
                                weight.const_data_ptr<scalar_t>(), rows, hidden, static_cast<float>(eps));
  });
}

// This step's K and V rows [T, KVH, D] (views of the qkv output: each token's KVH x D contiguous) copied to slot
// slots[t] of caches [blocks, block_size, KVH, D] of their dtype; slot -1 (padding) is skipped. One call where
// the torch path takes a mask, a check, a sync and two index_copy_ per layer.
void store_kv_(const at::Tensor& k, const at::Tensor& v, at::Tensor k_cache, at::Tensor v_cache,
               const at::Tensor& slots) {
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes() && k.stride(2) == 1 && v.stride(2) == 1 &&
                  k.stride(1) == k.size(2) && v.stride(1) == v.size(2),
              "store_kv_: k and v [T, KVH, D], each token's heads contiguous");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.sizes() == v_cache.sizes() &&
                  k_cache.dim() == 4 && k_cache.size(2) * k_cache.size(3) == k.size(1) * k.size(2) &&
                  k_cache.scalar_type() == k.scalar_type() && v_cache.scalar_type() == v.scalar_type() &&
                  k.scalar_type() == v.scalar_type(),
              "store_kv_: caches [blocks, block_size, KVH, D] of k's dtype");
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.is_contiguous() && slots.numel() == k.size(0),
              "store_kv_: slots int64 [T]");
  const int64_t tokens = k.size(0), capacity = k_cache.size(0) * k_cache.size(1);
  const int64_t bytes = k.size(1) * k.size(2) * k.element_size();
  const int64_t* s = slots.const_data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t)
    TORCH_CHECK(s[t] < capacity, "store_kv_: slot ", s[t], " outside the cache of ", capacity);
  const char *kp = static_cast<const char*>(k.const_data_ptr()), *vp = static_cast<const char*>(v.const_data_ptr());
  char *kc = static_cast<char*>(k_cache.data_ptr()), *vc = static_cast<char*>(v_cache.data_ptr());
  const int64_t kt = k.stride(0) * k.element_size(), vt = v.stride(0) * v.element_size();
  at::parallel_for(0, tokens, 256, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (s[t] < 0) continue;
      std::memcpy(kc + s[t] * bytes, kp + t * kt, bytes);
      std::memcpy(vc + s[t] * bytes, vp + t * vt, bytes);
    }
  });
}

// gate_up [T, 2I] (gate | up) -> dtype(dtype(silu(gate)) * up) [T, I]: F.silu then mul_, as the MLP does.
template <typename T>
void silu_mul_rows(const T* x, T* out, int64_t rows, int64_t inter) {
  constexpr int64_t CHUNK = 256;
  at::parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    alignas(64) float g[CHUNK], u[CHUNK];
    for (int64_t r = begin; r < end; ++r) {
      const T* gate = x + r * 2 * inter;
      for (int64_t c0 = 0; c0 < inter; c0 += CHUNK) {
        const int64_t n = std::min(CHUNK, inter - c0);
        widen(gate + c0, g, n);
        widen(gate + inter + c0, u, n);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.f + std::exp(-g[i]));
        round_in_place<T>(g, n);
        for (int64_t i = 0; i < n; ++i) g[i] *= u[i];
        round_in_place<T>(g, n);
        narrow(g, out + r * inter + c0, n);
      }
    }
  });
}

at::Tensor silu_and_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.size(-1) % 2 == 0, "silu_and_mul: the last dimension holds gate then up");
  const auto xc = gate_up.contiguous();
  const int64_t inter = xc.size(-1) / 2, rows = inter ? xc.numel() / (2 * inter) : 0;
  auto sizes = xc.sizes().vec();
  sizes.back() = inter;
  auto out = at::empty(sizes, xc.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "silu_and_mul", [&] {
    silu_mul_rows<scalar_t>(xc.const_data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows, inter);
  });
  return out;
}

// Rotate-half rotary embedding of one head row in place: x[i] cos[i] - x[i + D/2] sin[i] (first half),
// x[i] cos[i] + x[i - D/2] sin[i] (second half), with cos and sin (`c`, `s`: fp32, already rounded to x's
// dtype) and each product rounded, as the torch path computes it. `a` and `b` are scratch of D floats.
template <typename T>
inline void rotate(T* x, const float* c, const float* s, int64_t dim, float* a, float* b) {
  const int64_t half = dim / 2;
  widen(x, a, dim);
  for (int64_t i = 0; i < half; ++i) b[i] = -a[i + half] * s[i];
  for (int64_t i = half; i < dim; ++i) b[i] = a[i - half] * s[i];
  for (int64_t i = 0; i < dim; ++i) a[i] *= c[i];
  round_in_place<T>(a, dim);
  round_in_place<T>(b, dim);
  for (int64_t i = 0; i < dim; ++i) a[i] += b[i];
  round_in_place<T>(a, dim);
  narrow(a, x, dim);
}

// q [T, H, D] and k [T, KVH, D], any row strides (views of the fused qkv output), rotated in place.
template <typename T, typename C>
void rotary_rows(T* q, T* k, const int64_t* positions, const C* cos, const C* sin, int64_t tokens,
                 int64_t heads, int64_t kv_heads, int64_t dim, int64_t q_token, int64_t q_head, int64_t k_token,
                 int64_t k_head) {
  at::parallel_for(0, tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(4 * dim);
    float *c = scratch.data(), *s = c + dim, *a = s + dim, *b = a + dim;
    for (int64_t t = begin; t < end; ++t) {
      widen(cos + positions[t] * dim, c, dim);
      widen(sin + positions[t] * dim, s, dim);
      round_in_place<T>(c, dim);
      round_in_place<T>(s, dim);
      for (int64_t h = 0; h < heads; ++h) rotate(q + t * q_token + h * q_head, c, s, dim, a, b);
      for (int64_t h = 0; h < kv_heads; ++h) rotate(k + t * k_token + h * k_head, c, s, dim, a, b);
    }
  });
}

void rotary_(at::Tensor q, at::Tensor k, const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0) && q.size(2) == k.size(2) &&
                  q.scalar_type() == k.scalar_type() && q.stride(2) == 1 && k.stride(2) == 1,
              "rotary_: q [T, H, D] and k [T, KVH, D] of one dtype, unit stride along D");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.is_contiguous() && positions.numel() == q.size(0),
              "rotary_: positions int64 [T]");
  TORCH_CHECK((cos.scalar_type() == at::kFloat || cos.scalar_type() == q.scalar_type()) &&
                  sin.scalar_type() == cos.scalar_type() && cos.is_contiguous() && sin.is_contiguous() &&
                  cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(1) == q.size(2),
              "rotary_: cos/sin [positions, D], float32 or q's dtype");
  const int64_t tokens = q.size(0), dim = q.size(2);
  const int64_t* pos = positions.const_data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t)
    TORCH_CHECK(pos[t] >= 0 && pos[t] < cos.size(0), "rotary_: position ", pos[t], " outside the table of ",
                cos.size(0));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "rotary_", [&] {
    auto run = [&](auto tag) {
      using C = decltype(tag);
      rotary_rows<scalar_t, C>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), pos, cos.const_data_ptr<C>(),
                               sin.const_data_ptr<C>(), tokens, q.size(1), k.size(1), dim, q.stride(0), q.stride(1),
                               k.stride(0), k.stride(1));
    };
    if (cos.scalar_type() == at::kFloat)
      run(float{});
    else
      run(scalar_t{});
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmbench_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("silu_and_mul(Tensor gate_up) -> Tensor");
  m.def("add_rms_norm_(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()");
  m.def("store_kv_(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor slots) -> ()");
  m.def("rotary_(Tensor(a!) q, Tensor(b!) k, Tensor positions, Tensor cos, Tensor sin) -> ()");
  m.impl("rms_norm", c10::DispatchKey::CPU, TORCH_FN(rms_norm));
  m.impl("silu_and_mul", c10::DispatchKey::CPU, TORCH_FN(silu_and_mul));
  m.impl("add_rms_norm_", c10::DispatchKey::CPU, TORCH_FN(add_rms_norm_));
  m.impl("store_kv_", c10::DispatchKey::CPU, TORCH_FN(store_kv_));
  m.impl("rotary_", c10::DispatchKey::CPU, TORCH_FN(rotary_));
}
