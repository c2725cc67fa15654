// The decode kernel's paths for CPUs with bf16 instructions, included by cpu_decode_attention.cpp after its vector
// helpers (vf, W, load_vec, prefetch). Each compiles only where the compiler targets the instructions
// (-march=native), and the kernel falls back to its vector path elsewhere.
// It is included inside that file's anonymous namespace, so the system headers it needs (immintrin.h, and
// sys/syscall.h and unistd.h for AMX) are included at the top of the .cpp.
#pragma once

#if defined(__AVX512BF16__)
// A bf16 V block two tokens at a time: vdpbf16ps multiplies the pairs (p[j], p[j+1]) . (v[j][d], v[j+1][d]) and
// adds both into fp32, so a 16-dim slice of two rows costs one permute (to interleave them) and one instruction
// per head instead of two widenings and two FMAs per head. The weights p are rounded to bf16 for it (0.4 % at
// most each; vLLM-CPU's bf16 kernels do the same); an odd last token goes the fp32 way.
template <int NG>
inline void accumulate_pairs_bf16(const float* p, const c10::BFloat16* v, int64_t n, int64_t row, int64_t dim,
                                  int64_t stride, float* out) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                              22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const int64_t pairs = n / 2;
  // bf16 pairs (p[g][2i] low, p[g][2i+1] high), rounded to nearest even 16 at a time (vcvtneps2bf16: a scalar
  // rounding per weight cost about as much as the V sums themselves); blocks hold up to 128 tokens here
  uint32_t weights[NG][64];
  for (int g = 0; g < NG; ++g)
    for (int64_t i = 0; i < 2 * pairs; i += 16) {
      const __mmask16 m = static_cast<__mmask16>((1u << std::min<int64_t>(16, 2 * pairs - i)) - 1);
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, p + g * stride + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&weights[g][i / 2]), (__m256i)h);
    }
  for (int64_t c = 0; c < dim; c += W) {
    __m512 acc[NG];
    for (int g = 0; g < NG; ++g) acc[g] = _mm512_loadu_ps(out + g * dim + c);
    const c10::BFloat16* vt = v + c;
    for (int64_t i = 0; i < pairs; ++i, vt += 2 * row) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vt));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vt + row));
      const __m512bh both = (__m512bh)_mm512_permutexvar_epi16(
          interleave, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
      for (int g = 0; g < NG; ++g)
        acc[g] = _mm512_dpbf16_ps(acc[g], (__m512bh)_mm512_set1_epi32(static_cast<int>(weights[g][i])), both);
    }
    if (n % 2) {
      const vf vc = load_vec(vt);
      for (int g = 0; g < NG; ++g) {
        vf a;
        std::memcpy(&a, &acc[g], sizeof a);
        a += p[g * stride + n - 1] * vc;
        std::memcpy(&acc[g], &a, sizeof a);
      }
    }
    for (int g = 0; g < NG; ++g) _mm512_storeu_ps(out + g * dim + c, acc[g]);
  }
}
#endif

#if defined(__AVX512BF16__)
constexpr bool kHaveDpBf16 = true;

// The K pass of a bf16 cache for a bf16 query, read as they are: vdpbf16ps multiplies 32 dims of q and of a K
// row pairwise and adds each pair into one of 16 fp32 sums, so one instruction per 32 dims and query head
// replaces the two widenings and two FMAs of the vector path. The products of two bf16 are exact in fp32, so
// only the order of the additions differs from it.
template <int NG>
inline void score_block(const c10::BFloat16* q, int64_t q_head, const c10::BFloat16* k, int64_t n, int64_t row,
                        int64_t dim, float scale, float* s, int64_t stride, const c10::BFloat16* next,
                        const c10::BFloat16* far) {
  for (int64_t j = 0; j < n; ++j, k += row) {
    prefetch_rows(next, far, j, j + 1, row, dim);
    __m512 acc[NG];
    for (int g = 0; g < NG; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t c = 0; c < dim; c += 32) {
      const __m512bh kc = (__m512bh)_mm512_loadu_si512(k + c);
      for (int g = 0; g < NG; ++g)
        acc[g] = _mm512_dpbf16_ps(acc[g], (__m512bh)_mm512_loadu_si512(q + g * q_head + c), kc);
    }
    if constexpr (NG == 4)
      store_sums4(acc, scale, s + j, stride);
    else
      for (int g = 0; g < NG; ++g) s[g * stride + j] = scale * _mm512_reduce_add_ps(acc[g]);
  }
}
#else
constexpr bool kHaveDpBf16 = false;
#endif

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
// AMX (Sapphire Rapids and later, where the compiler targets it): the K pass of a bf16 cache as tile products.
// For 16 tokens and one KV head, scores[16 x G] = K[16 x 32 dims] . Q^T[32 dims x G] is one tdpbf16ps per 32
// dims: K's rows load as they lie in the block (a row stride apart), and Q, fixed for the sequence, is packed
// once in the pairs layout the instruction wants. The vector path spends a horizontal sum per token and head,
// which left a bf16 decode no faster than an fp32 one.
constexpr bool kHaveAmx = true;

bool amx_usable() {  // Linux hands out the tile state only on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
  static const bool ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ok;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tmm0: scores of 16 tokens x G heads (fp32); tmm1: 16 K rows x 32 dims; tmm2: 32 dims of G query heads, in pairs.
void amx_configure(int64_t group) {
  TileConfig cfg;
  cfg.rows[0] = cfg.rows[1] = cfg.rows[2] = 16;
  cfg.colsb[0] = cfg.colsb[2] = static_cast<uint16_t>(group * 4);
  cfg.colsb[1] = 64;
  _tile_loadconfig(&cfg);
}

// pack[((h * D/32 + c) * 16 + r) * G + g][e] = q[h * G + g][c * 32 + 2r + e], as bf16 bits.
void amx_pack_q(const c10::BFloat16* q, int64_t q_head, int64_t heads, int64_t kv_heads, int64_t dim, uint16_t* pack) {
  const int64_t group = heads / kv_heads, chunks = dim / 32;
  for (int64_t h = 0; h < kv_heads; ++h)
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t r = 0; r < 16; ++r)
        for (int64_t g = 0; g < group; ++g)
          for (int64_t e = 0; e < 2; ++e)
            pack[(((h * chunks + c) * 16 + r) * group + g) * 2 + e] = q[(h * group + g) * q_head + c * 32 + 2 * r + e].x;
}

void amx_score_sequence(const uint16_t* pack, const c10::BFloat16* k_cache, const int32_t* table, int64_t len,
                        int64_t block_size, int64_t heads, int64_t kv_heads, int64_t dim, float scale, float* scores) {
  const int64_t group = heads / kv_heads, row = kv_heads * dim, block = block_size * row, chunks = dim / 32;
  alignas(64) float c[16 * 16];
  for (int64_t start = 0; start < len; start += 16) {
    const int64_t i = start / block_size, within = start % block_size, n = std::min<int64_t>(16, len - start);
    if (within == 0 && (i + 1) * block_size < len) prefetch(k_cache + int64_t(table[i + 1]) * block, block);
    const c10::BFloat16* kb = k_cache + int64_t(table[i]) * block + within * row;
    for (int64_t h = 0; h < kv_heads; ++h) {
      _tile_zero(0);
      for (int64_t ch = 0; ch < chunks; ++ch) {
        _tile_loadd(1, kb + h * dim + ch * 32, row * 2);
        _tile_loadd(2, pack + (h * chunks + ch) * 16 * group * 2, group * 4);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, c, group * 4);
      for (int64_t g = 0; g < group; ++g) {
        float* s = scores + (h * group + g) * len + start;
        for (int64_t j = 0; j < n; ++j) s[j] = c[j * group + g] * scale;
      }
    }
  }
}
#else
constexpr bool kHaveAmx = false;
bool amx_usable() { return false; }
void amx_configure(int64_t) {}
void amx_pack_q(const c10::BFloat16*, int64_t, int64_t, int64_t, int64_t, uint16_t*) {}
void amx_score_sequence(const uint16_t*, const c10::BFloat16*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                        int64_t, float, float*) {}
#endif

