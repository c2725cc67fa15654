// Paged decode attention for the CPU: one query token per sequence, K/V read in place through the block table.
//
// One task per sequence. Each block is read whole (every KV head's rows are contiguous in it), once for K and
// once for V, straight from the pool: no gathered copy, no padding to the longest context. The G = H / KVH
// query heads that share a KV head are scored together. Two passes: logits for all positions, softmax, then
// the weighted sum of V rows.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__) || (defined(__AMX_TILE__) && defined(__AMX_BF16__))
#include <immintrin.h>
#endif
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {

#if defined(__AVX512F__)
constexpr int W = 16;  // floats per vector: one AVX-512 register
#else
constexpr int W = 8;  // one AVX2 register: 16-float vectors lowered to two made the kernel 3.2x slower (Zen 3)
#endif
typedef float vf __attribute__((vector_size(W * sizeof(float))));

template <typename T>
inline vf load_vec(const T* p) {
  vf r;
  for (int i = 0; i < W; ++i) r[i] = static_cast<float>(p[i]);
  return r;
}

template <>
inline vf load_vec<float>(const float* p) {
  vf r;
  std::memcpy(&r, p, sizeof r);
  return r;
}

// bf16 is the top half of an fp32: widen 16 of them with one zero-extend and one shift (vpmovzxwd, vpslld)
// rather than a scalar conversion per element, which left a bf16 cache no faster to read than an fp32 one.
template <>
inline vf load_vec<c10::BFloat16>(const c10::BFloat16* p) {
  typedef uint16_t vh __attribute__((vector_size(W * sizeof(uint16_t))));
  typedef uint32_t vu __attribute__((vector_size(W * sizeof(uint32_t))));
  vh h;
  std::memcpy(&h, p, sizeof h);
  const vu u = __builtin_convertvector(h, vu) << 16;
  vf r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

inline float hsum(vf v) {
  float s = 0.f;
  for (int i = 0; i < W; ++i) s += v[i];
  return s;
}

#if defined(__AVX512F__) || defined(__AVX2__)
// {sum(a), sum(b), sum(c), sum(d)} in one tree: four horizontal sums of 16 floats take ~32 instructions, this 13;
// of 8 floats (AVX2) ~24, this 5.
inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

#if defined(__AVX512F__)
using hvec = __m512;  // vf as the intrinsics name it
inline __m256 fold(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) { return reduce4(fold(a), fold(b), fold(c), fold(d)); }
#else
using hvec = __m256;
#endif

// scale * {sum(a[0]), ..., sum(a[3])} to s[0], s[stride], s[2 stride], s[3 stride]: the four query heads of a KV
// head (GQA 4) for one token.
inline void store_sums4(const hvec* a, float scale, float* s, int64_t stride) {
  alignas(16) float sums[4];
  _mm_store_ps(sums, _mm_mul_ps(reduce4(a[0], a[1], a[2], a[3]), _mm_set1_ps(scale)));
  for (int g = 0; g < 4; ++g) s[g * stride] = sums[g];
}
#endif

// Blocks are scattered over the pool, so the hardware prefetcher cannot see the next one coming: while a
// block is read, its successor is requested a row at a time (1.6x faster than not asking, measured here on a
// pool larger than the cache; asking for the whole block at once gained less).
// The prefetch helpers are always inlined: to GCC a function that only prefetches has no effect, and a call
// it chose not to inline was deleted, taking every prefetch of the float paths with it (GCC 12, -O3).
template <typename T>
__attribute__((always_inline)) inline void prefetch(const T* p, int64_t elements) {
  for (int64_t off = 0; off < elements; off += 64 / sizeof(T)) __builtin_prefetch(p + off);
}

// Asking the L1 for more than the next block gains nothing: it keeps only a few dozen misses in flight. The L2
// keeps more, so blocks L2_AHEAD ahead are asked of it (prefetcht1): 1.2-1.6x on the decode microbenchmark
// (2 threads, scattered blocks, Zen 4), while data already in the cache loses ~10 % to the extra instructions.
constexpr int64_t L2_AHEAD = 3;

template <typename T>
__attribute__((always_inline)) inline void prefetch_l2(const T* block, int64_t elements) {
  const char* p = reinterpret_cast<const char*>(block);
  for (int64_t off = 0; off < elements * int64_t(sizeof(T)); off += 64) __builtin_prefetch(p + off, 0, 2);
}

// Rows [first, last) of one KV head in the next block (to the L1) and in the block L2_AHEAD on (to the L2).
// The passes ask a few rows at a time as they go, not a whole block at a block's start: a burst of 128
// prefetches fills the core's miss buffers, and the core then waits on the prefetches themselves (perf on a
// Zen 3: a quarter of the kernel's samples on its bulk prefetch loop; spread out, 1.2-1.45x the K/V bytes a
// second on huge-page pools larger than the cache).
template <typename T>
__attribute__((always_inline)) inline void prefetch_rows(const T* next, const T* far, int64_t first,
                                                       int64_t last, int64_t row, int64_t dim) {
  for (int64_t j = first; j < last; ++j) {
    if (next) prefetch(next + j * row, dim);
    if (far) prefetch_l2(far + j * row, dim);
  }
}

// Logits of NG query heads (rows of q, q_head apart) for the n tokens of one block of one KV head:
// s[g * stride + j] = scale * q[g] . k[j]. Token j's K row starts at k + j * row; `next` and `far` are the same
// KV head's rows in blocks to come (prefetch_rows).
template <int NG, typename T>
inline void score_block(const float* q, int64_t q_head, const T* k, int64_t n, int64_t row, int64_t dim, float scale,
                        float* s, int64_t stride, const T* next, const T* far) {
  for (int64_t j = 0; j < n; ++j, k += row) {
    prefetch_rows(next, far, j, j + 1, row, dim);
    vf acc[NG] = {};
    for (int64_t c = 0; c < dim; c += W) {
      const vf kc = load_vec(k + c);
      for (int g = 0; g < NG; ++g) acc[g] += load_vec(q + g * q_head + c) * kc;
    }
#if defined(__AVX512F__) || defined(__AVX2__)
    if constexpr (NG == 4) {
      const hvec a[4] = {(hvec)acc[0], (hvec)acc[1], (hvec)acc[2], (hvec)acc[3]};
      store_sums4(a, scale, s + j, stride);
      continue;
    }
#endif
    for (int g = 0; g < NG; ++g) s[g * stride + j] = scale * hsum(acc[g]);
  }
}

// The paths for CPUs with bf16 instructions (AMX tile scores, vdpbf16ps K and V sums), on the helpers above.
#include "cpu_decode_bf16.h"

// out[g] += sum_j p[g * stride + j] * v[j] for the n tokens of one block, one 16-float slice at a time so
// the sums stay in registers.
template <int NG, typename T>
inline void accumulate_block(const float* p, const T* v, int64_t n, int64_t row, int64_t dim, int64_t stride,
                             float* out, const T* next, const T* far) {
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    if (n <= 128) {
      prefetch_rows(next, far, 0, n, row, dim);
      return accumulate_pairs_bf16<NG>(p, v, n, row, dim, stride, out);
    }
  }
#endif
  const int64_t rows_per_slice = (n * W + dim - 1) / dim;
  for (int64_t c = 0; c < dim; c += W) {
    const int64_t first = c / W * rows_per_slice;
    prefetch_rows(next, far, std::min(first, n), std::min(first + rows_per_slice, n), row, dim);
    vf acc[NG];
    for (int g = 0; g < NG; ++g) acc[g] = load_vec(out + g * dim + c);
    const T* vt = v + c;
    for (int64_t j = 0; j < n; ++j, vt += row) {
      const vf vc = load_vec(vt);
      for (int g = 0; g < NG; ++g) acc[g] += p[g * stride + j] * vc;
    }
    for (int g = 0; g < NG; ++g) std::memcpy(out + g * dim + c, &acc[g], sizeof(vf));
  }
}

constexpr int MAX_GROUP = 4;  // query heads per KV head kept in registers at once; larger groups take turns

// Calls f.template operator()<NG>(first query head, KV head) for every (KV head, group of <= 4 query heads).
template <typename F>
inline void for_head_groups(int64_t kv_heads, int64_t group, F&& f) {
  for (int64_t h = 0; h < kv_heads; ++h) {
    for (int64_t g0 = 0; g0 < group; g0 += MAX_GROUP) {
      const int64_t first = h * group + g0;
      switch (std::min<int64_t>(MAX_GROUP, group - g0)) {
        case 1: f.template operator()<1>(first, h); break;
        case 2: f.template operator()<2>(first, h); break;
        case 3: f.template operator()<3>(first, h); break;
        default: f.template operator()<4>(first, h); break;
      }
    }
  }
}

// The K pass of one sequence: scores[hq * len + t] = scale * q[hq] . k[t], each block read once for all its KV
// heads. Its last blocks ask the L2 for the first V blocks, so the V pass starts warm. A KV head's rows to come
// are asked for once, by its first group of query heads. q is fp32, or the bf16
// query itself for score_block's vdpbf16ps overload.
template <typename T, typename QT>
void score_sequence(const QT* q, int64_t q_head, const T* k_cache, const T* v_cache, const int32_t* table,
                    int64_t len, int64_t block_size, int64_t heads, int64_t kv_heads, int64_t dim, float scale,
                    float* scores) {
  const int64_t group = heads / kv_heads, row = kv_heads * dim, block = block_size * row;
  const int64_t num_blocks = (len + block_size - 1) / block_size;
  for (int64_t i = 0; i < num_blocks; ++i) {
    const int64_t ahead = i + L2_AHEAD;
    const T* far = ahead < num_blocks       ? k_cache + int64_t(table[ahead]) * block
                   : ahead < 2 * num_blocks ? v_cache + int64_t(table[ahead - num_blocks]) * block
                                            : nullptr;
    const T* next = i + 1 < num_blocks ? k_cache + int64_t(table[i + 1]) * block : nullptr;
    const T* kb = k_cache + int64_t(table[i]) * block;
    const int64_t n = std::min(block_size, len - i * block_size);
    for_head_groups(kv_heads, group, [&]<int NG>(int64_t first, int64_t h) {
      const bool asks = first % group == 0;
      score_block<NG>(q + first * q_head, q_head, kb + h * dim, n, row, dim, scale,
                      scores + first * len + i * block_size, len, asks && next ? next + h * dim : nullptr,
                      asks && far ? far + h * dim : nullptr);
    });
  }
}

// Softmax over each head's scores, then the V pass: out[hq] = sum_t p[hq, t] v[t] * v_scale.
template <typename T>
void weigh_values(const T* v_cache, const int32_t* table, int64_t len, int64_t block_size, int64_t heads,
                  int64_t kv_heads, int64_t dim, float v_scale, float* scores, float* out) {
  const int64_t group = heads / kv_heads, row = kv_heads * dim, block = block_size * row;
  const int64_t num_blocks = (len + block_size - 1) / block_size;
  std::vector<float> norm(heads);
  for (int64_t hq = 0; hq < heads; ++hq) {
    float* s = scores + hq * len;
    const float m = *std::max_element(s, s + len);
    float sum = 0.f;
    for (int64_t t = 0; t < len; ++t) sum += (s[t] = std::exp(s[t] - m));
    norm[hq] = v_scale / sum;
  }
  std::fill(out, out + heads * dim, 0.f);
  for (int64_t i = 0; i < num_blocks; ++i) {
    const T* far = i + L2_AHEAD < num_blocks ? v_cache + int64_t(table[i + L2_AHEAD]) * block : nullptr;
    const T* next = i + 1 < num_blocks ? v_cache + int64_t(table[i + 1]) * block : nullptr;
    const T* vb = v_cache + int64_t(table[i]) * block;
    const int64_t n = std::min(block_size, len - i * block_size);
    for_head_groups(kv_heads, group, [&]<int NG>(int64_t first, int64_t h) {
      const bool asks = first % group == 0;
      accumulate_block<NG>(scores + first * len + i * block_size, vb + h * dim, n, row, dim, len, out + first * dim,
                          asks && next ? next + h * dim : nullptr, asks && far ? far + h * dim : nullptr);
    });
  }
  for (int64_t hq = 0; hq < heads; ++hq)
    for (int64_t d = 0; d < dim; ++d) out[hq * dim + d] *= norm[hq];
}

// q is widened to fp32 per sequence (or read as it is for vdpbf16ps, or packed for AMX), and the output rounded
// to q's dtype at the end, inside the task.
template <typename T, typename Q>
void decode(const Q* q, int64_t q_token, int64_t q_head, const T* k_cache, const T* v_cache, const int32_t* tables,
            const int32_t* lens, Q* out, int64_t batch, int64_t heads, int64_t kv_heads, int64_t dim,
            int64_t block_size, int64_t table_width, float scale, float v_scale, bool amx) {
  // Contexts differ by 100x in a ShareGPT batch: hand out sequences one at a time, not in equal slices.
#pragma omp parallel num_threads(at::get_num_threads())
  {
    std::vector<float> scores, qf(heads * dim), of(heads * dim);
    std::vector<uint16_t> pack(amx ? heads * dim : 0);
    if (amx) amx_configure(heads / kv_heads);
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t* table = tables + b * table_width;
      scores.resize(heads * lens[b]);
      if constexpr (std::is_same_v<T, c10::BFloat16> && std::is_same_v<Q, c10::BFloat16>) {
        if (amx) {
          amx_pack_q(q + b * q_token, q_head, heads, kv_heads, dim, pack.data());
          amx_score_sequence(pack.data(), k_cache, table, lens[b], block_size, heads, kv_heads, dim, scale,
                             scores.data());
        }
      }
      bool scored = amx;
      if constexpr (std::is_same_v<T, c10::BFloat16> && std::is_same_v<Q, c10::BFloat16> && kHaveDpBf16) {
        if (!amx && dim % 32 == 0) {
          score_sequence<T>(q + b * q_token, q_head, k_cache, v_cache, table, lens[b], block_size, heads, kv_heads,
                            dim, scale, scores.data());
          scored = true;
        }
      }
      if (!scored) {
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < dim; ++d) qf[h * dim + d] = static_cast<float>(q[b * q_token + h * q_head + d]);
        score_sequence<T>(qf.data(), dim, k_cache, v_cache, table, lens[b], block_size, heads, kv_heads, dim, scale,
                          scores.data());
      }
      weigh_values<T>(v_cache, table, lens[b], block_size, heads, kv_heads, dim, v_scale, scores.data(), of.data());
      for (int64_t i = 0; i < heads * dim; ++i) out[b * heads * dim + i] = static_cast<Q>(of[i]);
    }
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
    if (amx) _tile_release();
#endif
  }
}

// q: [B, H, D] float32, bfloat16 or float16, unit stride along D; k_cache, v_cache: [num_blocks, block_size, KVH, D]; block_tables: [B, W] int32;
// seq_lens: [B] int32 (>= 1). Returns [B, H, D] in q's dtype. An fp8 cache holds K/k_scale and V/v_scale: the
// caller folds k_scale into `scale`, and v_scale multiplies the output.
at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& block_tables, const at::Tensor& seq_lens, double scale, double v_scale,
                        bool use_amx) {
  TORCH_CHECK(q.dim() == 3 && q.stride(2) == 1 &&
                  (q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf),
              "q: float32, bfloat16 or float16 [B, H, D], unit stride along D");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.is_contiguous() &&
                  k_cache.scalar_type() == v_cache.scalar_type() && k_cache.sizes() == v_cache.sizes(),
              "k_cache/v_cache: contiguous [num_blocks, block_size, KVH, D] of one dtype");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && block_tables.is_contiguous() && block_tables.dim() == 2,
              "block_tables: contiguous int32 [B, W]");
  TORCH_CHECK(seq_lens.scalar_type() == at::kInt && seq_lens.is_contiguous(), "seq_lens: contiguous int32 [B]");
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = k_cache.size(2);
  TORCH_CHECK(k_cache.size(3) == dim && heads % kv_heads == 0, "head_dim or head counts do not match the cache");
  TORCH_CHECK(block_tables.size(0) == batch && seq_lens.size(0) == batch, "one block table and length per query");
  TORCH_CHECK(dim % 16 == 0, "head_dim must be a multiple of ", 16);  // on every ISA: a model takes one path
  const auto block_size = k_cache.size(1), width = block_tables.size(1), pool = k_cache.size(0);
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {  // the kernel trusts these: every read stays inside the pool
    const int64_t blocks = (int64_t(lens[b]) + block_size - 1) / block_size;
    TORCH_CHECK(lens[b] >= 1 && blocks <= width, "sequence ", b, ": length ", lens[b], " needs 1 to ", width,
                " blocks of ", block_size);
    for (int64_t i = 0; i < blocks; ++i)
      TORCH_CHECK(tables[b * width + i] >= 0 && tables[b * width + i] < pool, "sequence ", b, ": block id ",
                  tables[b * width + i], " outside the pool of ", pool);
  }
  auto out = at::empty({batch, heads, dim}, q.options());
  const bool amx = use_amx && kHaveAmx && k_cache.scalar_type() == at::kBFloat16 && q.scalar_type() == at::kBFloat16 &&
                   block_size % 16 == 0 && dim % 32 == 0 && heads / kv_heads <= 16 && amx_usable();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "paged_decode", [&] {
      decode<T, scalar_t>(q.const_data_ptr<scalar_t>(), q.stride(0), q.stride(1),
                          static_cast<const T*>(k_cache.const_data_ptr()), static_cast<const T*>(v_cache.const_data_ptr()),
                          tables, lens, out.data_ptr<scalar_t>(), batch, heads, kv_heads, dim, block_size, width,
                          static_cast<float>(scale), static_cast<float>(v_scale), amx);
    });
  };
  switch (k_cache.scalar_type()) {
    case at::kFloat: run(float{}); break;
    case at::kBFloat16: run(c10::BFloat16{}); break;
    case at::kHalf: run(c10::Half{}); break;
    case at::kFloat8_e4m3fn: run(c10::Float8_e4m3fn{}); break;
    case at::kFloat8_e5m2: run(c10::Float8_e5m2{}); break;
    default: TORCH_CHECK(false, "unsupported KV cache dtype ", k_cache.scalar_type());
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(llmbench_cpu, m) {
  m.def("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, Tensor seq_lens, float scale, "
        "float v_scale, bool use_amx=True) -> Tensor");
  m.impl("paged_decode", c10::DispatchKey::CPU, TORCH_FN(paged_decode));
  m.def("has_amx() -> bool", [] { return kHaveAmx && amx_usable(); });
}
