// Linear layers for steps of few rows (a decode step at low load, the drain of a batch): y = x W^T with W read
// once, as one sequential stream per block of output columns.
//
// A step of one to a few rows is bound by reading the weights. oneDNN's packed GEMM streamed the small model's
// 61.6 MB of bf16 weights at ~13 GB/s at 1-4 rows on a Zen 4 that reads ~32 GB/s; laid out so that a block of
// 4 vectors of output columns takes its K weights in order ([blocks][K][4][W], bf16 as [blocks][K/2][4][16][2]
// for vdpbf16ps), one pass reads it at close to the memory's rate. Rows beyond the first four are taken four at a
// time over the same block, which the first pass left in L2.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace {

constexpr int kTiles = 4;  // vectors of output columns per block

#if defined(__AVX512F__)
constexpr int kFloatWidth = 16;
using fvec = __m512;
inline fvec fzero() { return _mm512_setzero_ps(); }
inline fvec fload(const float* p) { return _mm512_loadu_ps(p); }
inline fvec fset1(float x) { return _mm512_set1_ps(x); }
inline fvec ffma(fvec a, fvec b, fvec c) { return _mm512_fmadd_ps(a, b, c); }
inline void fstore(float* p, fvec v) { _mm512_storeu_ps(p, v); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kFloatWidth = 8;
using fvec = __m256;
inline fvec fzero() { return _mm256_setzero_ps(); }
inline fvec fload(const float* p) { return _mm256_loadu_ps(p); }
inline fvec fset1(float x) { return _mm256_set1_ps(x); }
inline fvec ffma(fvec a, fvec b, fvec c) { return _mm256_fmadd_ps(a, b, c); }
inline void fstore(float* p, fvec v) { _mm256_storeu_ps(p, v); }
#else
constexpr int kFloatWidth = 0;
#endif

#if defined(__AVX512BF16__)
constexpr int kBf16Width = 16;
#else
constexpr int kBf16Width = 0;
#endif

// Up to MM rows (mm of them real; the rest repeat row 0 and are not stored) against one block.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
template <int MM>
void float_block(const float* w, int64_t K, const float* x, int mm, float* y, int64_t N, int valid) {
  fvec acc[MM][kTiles];
  for (int i = 0; i < MM; ++i)
    for (int j = 0; j < kTiles; ++j) acc[i][j] = fzero();
  for (int64_t k = 0; k < K; ++k) {
    fvec wv[kTiles];
    for (int j = 0; j < kTiles; ++j) wv[j] = fload(w + (k * kTiles + j) * kFloatWidth);
    for (int i = 0; i < MM; ++i) {
      fvec xv = fset1(x[(i < mm ? i : 0) * K + k]);
      for (int j = 0; j < kTiles; ++j) acc[i][j] = ffma(wv[j], xv, acc[i][j]);
    }
  }
  float out[kTiles * kFloatWidth];
  for (int i = 0; i < mm; ++i) {
    for (int j = 0; j < kTiles; ++j) fstore(out + j * kFloatWidth, acc[i][j]);
    std::memcpy(y + i * N, out, valid * sizeof(float));
  }
}
#endif

#if defined(__AVX512BF16__)
template <int MM>
void bf16_block(const __m512i* w, int64_t K2, const int32_t* x, int mm, uint16_t* y, int64_t N, int valid) {
  __m512 acc[MM][kTiles];
  for (int i = 0; i < MM; ++i)
    for (int j = 0; j < kTiles; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K2; ++k) {
    __m512i wv[kTiles];
    for (int j = 0; j < kTiles; ++j) wv[j] = _mm512_loadu_si512(w + k * kTiles + j);
    for (int i = 0; i < MM; ++i) {
      __m512bh xv = (__m512bh)_mm512_set1_epi32(x[(i < mm ? i : 0) * K2 + k]);
      for (int j = 0; j < kTiles; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)wv[j], xv);
    }
  }
  uint16_t out[kTiles * 16];
  for (int i = 0; i < mm; ++i) {
    for (int j = 0; j < kTiles; ++j)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j * 16), (__m256i)_mm512_cvtneps_pbh(acc[i][j]));
    std::memcpy(y + i * N, out, valid * sizeof(uint16_t));
  }
}
#endif

// Rows in groups of four against each block; a block's columns past N (the packing's zero padding) not stored.
template <typename Block>
void each_block(int64_t M, int64_t N, int width, const Block& block) {
  const int64_t cols = kTiles * width, blocks = (N + cols - 1) / cols;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int valid = static_cast<int>(std::min(cols, N - b * cols));
      for (int64_t m0 = 0; m0 < M; m0 += 4) block(b, m0, static_cast<int>(std::min<int64_t>(4, M - m0)), valid);
    }
  });
}

at::Tensor gemv(const at::Tensor& x, const at::Tensor& packed, int64_t n) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && packed.is_contiguous(), "gemv: contiguous x [M, K] and packed W");
  TORCH_CHECK(x.scalar_type() == packed.scalar_type(), "gemv: x and W in one dtype");
  const int64_t M = x.size(0), K = x.size(1);
  auto y = at::empty({M, n}, x.options());
  if (M == 0) return y;
  if (x.scalar_type() == at::kFloat) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    TORCH_CHECK(packed.dim() == 4 && packed.size(1) == K && packed.size(0) * kTiles * kFloatWidth >= n,
                "gemv: W not packed for these shapes");
    const float *xp = x.data_ptr<float>(), *wp = packed.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    each_block(M, n, kFloatWidth, [&](int64_t b, int64_t m0, int mm, int valid) {
      const float* w = wp + b * K * kTiles * kFloatWidth;
      float* out = yp + m0 * n + b * kTiles * kFloatWidth;
      if (mm == 1) float_block<1>(w, K, xp + m0 * K, mm, out, n, valid);
      else if (mm == 2) float_block<2>(w, K, xp + m0 * K, mm, out, n, valid);
      else float_block<4>(w, K, xp + m0 * K, mm, out, n, valid);
    });
    return y;
#endif
  } else if (x.scalar_type() == at::kBFloat16) {
#if defined(__AVX512BF16__)
    TORCH_CHECK(K % 2 == 0 && packed.dim() == 5 && packed.size(1) * 2 == K && packed.size(0) * kTiles * 16 >= n,
                "gemv: W not packed for these shapes");
    const int64_t K2 = K / 2;
    auto xp = reinterpret_cast<const int32_t*>(x.data_ptr());
    auto wp = reinterpret_cast<const __m512i*>(packed.data_ptr());
    auto yp = reinterpret_cast<uint16_t*>(y.data_ptr());
    each_block(M, n, 16, [&](int64_t b, int64_t m0, int mm, int valid) {
      const __m512i* w = wp + b * K2 * kTiles;
      uint16_t* out = yp + m0 * n + b * kTiles * 16;
      if (mm == 1) bf16_block<1>(w, K2, xp + m0 * K2, mm, out, n, valid);
      else if (mm == 2) bf16_block<2>(w, K2, xp + m0 * K2, mm, out, n, valid);
      else bf16_block<4>(w, K2, xp + m0 * K2, mm, out, n, valid);
    });
    return y;
#endif
  }
  TORCH_CHECK(false, "gemv: no kernel for ", x.scalar_type(), " in this build");
}

// Output columns per vector for a dtype in this build (0: none).
int64_t gemv_width(c10::ScalarType dtype) {
  return dtype == at::kFloat ? kFloatWidth : dtype == at::kBFloat16 ? kBf16Width : 0;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmbench_cpu, m) {
  m.def("gemv(Tensor x, Tensor packed, int n) -> Tensor");
  m.def("gemv_width(ScalarType dtype) -> int", &gemv_width);
  m.impl("gemv", c10::DispatchKey::CPU, TORCH_FN(gemv));
}
