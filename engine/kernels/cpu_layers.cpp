// The elementwise layers of a Llama block for the CPU, each one pass over its rows: RMSNorm, rotary embedding
// (in place on q and k) and SiLU(gate) * up. torch runs each as five to eight separate ops, every one reading and
// writing the whole activation (a bf16 decode step at batch 256 spent ~0.9 ms a layer in them against ~0.05 ms
// here); vLLM-CPU has the same three as custom ops. Arithmetic is fp32 and each result is rounded to the
// activation's dtype where torch's ops round it, so bf16 outputs match the torch path's to the last bit or one.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>

namespace {

template <typename T>
inline float as_float(T v) {
  return static_cast<float>(v);
}

template <typename T>
inline T round_to(float v) {
  return static_cast<T>(v);
}

// Rows of x [T, H] -> weight * dtype(x * rsqrt(mean(x^2) + eps)), as the reference RMSNorm rounds it.
template <typename T>
void rms_norm_rows(const T* x, const T* w, T* out, int64_t rows, int64_t hidden, float eps) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * hidden;
      T* o = out + r * hidden;
      float sum = 0.f;
      for (int64_t i = 0; i < hidden; ++i) sum += as_float(xr[i]) * as_float(xr[i]);
      const float inv = 1.f / std::sqrt(sum / hidden + eps);
      for (int64_t i = 0; i < hidden; ++i)
        o[i] = round_to<T>(as_float(w[i]) * as_float(round_to<T>(as_float(xr[i]) * inv)));
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

// gate_up [T, 2I] (gate | up) -> dtype(dtype(silu(gate)) * up) [T, I]: F.silu then mul_, as the MLP does.
template <typename T>
void silu_mul_rows(const T* x, T* out, int64_t rows, int64_t inter) {
  at::parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* gate = x + r * 2 * inter;
      const T* up = gate + inter;
      T* o = out + r * inter;
      for (int64_t i = 0; i < inter; ++i) {
        const float g = as_float(gate[i]);
        o[i] = round_to<T>(as_float(round_to<T>(g / (1.f + std::exp(-g)))) * as_float(up[i]));
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

// Rotate-half rotary embedding of one head row in place: x[i] = x[i] cos[i] - x[i + D/2] sin[i] (first half),
// x[i] cos[i] + x[i - D/2] sin[i] (second half), cos and sin ([positions, D], fp32 or x's dtype) rounded to x's
// dtype first, each product rounded, as the torch path computes it.
template <typename T, typename C>
inline void rotate(T* x, const C* cos, const C* sin, int64_t dim) {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = as_float(x[i]), b = as_float(x[i + half]);
    const float c0 = as_float(round_to<T>(cos[i])), s0 = as_float(round_to<T>(sin[i]));
    const float c1 = as_float(round_to<T>(cos[i + half])), s1 = as_float(round_to<T>(sin[i + half]));
    x[i] = round_to<T>(as_float(round_to<T>(a * c0)) + as_float(round_to<T>(-b * s0)));
    x[i + half] = round_to<T>(as_float(round_to<T>(b * c1)) + as_float(round_to<T>(a * s1)));
  }
}

// q [T, H, D] and k [T, KVH, D], any row strides (views of the fused qkv output), rotated in place.
template <typename T, typename C>
void rotary_rows(T* q, T* k, const int64_t* positions, const C* cos, const C* sin, int64_t tokens,
                 int64_t heads, int64_t kv_heads, int64_t dim, int64_t q_token, int64_t q_head, int64_t k_token,
                 int64_t k_head) {
  at::parallel_for(0, tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const C* c = cos + positions[t] * dim;
      const C* s = sin + positions[t] * dim;
      for (int64_t h = 0; h < heads; ++h) rotate(q + t * q_token + h * q_head, c, s, dim);
      for (int64_t h = 0; h < kv_heads; ++h) rotate(k + t * k_token + h * k_head, c, s, dim);
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
  m.def("rotary_(Tensor(a!) q, Tensor(b!) k, Tensor positions, Tensor cos, Tensor sin) -> ()");
  m.impl("rms_norm", c10::DispatchKey::CPU, TORCH_FN(rms_norm));
  m.impl("silu_and_mul", c10::DispatchKey::CPU, TORCH_FN(silu_and_mul));
  m.impl("rotary_", c10::DispatchKey::CPU, TORCH_FN(rotary_));
}
