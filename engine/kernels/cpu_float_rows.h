// Row helpers shared by cpu_layers.cpp and cpu_row_reductions.cpp, included inside their anonymous namespaces
// (after <ATen/ATen.h>, <cstdint> and <type_traits>).
#pragma once

// Row helpers over fp32 scratch, in plain loops the compiler vectorizes. bf16 is the top half of an fp32, so
// widening is a shift and rounding to nearest even is integer arithmetic on the bits (c10's per-element
// conversion, with its NaN branch, kept these loops scalar).
template <typename T>
inline void widen(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

template <>
inline void widen<c10::BFloat16>(const c10::BFloat16* src, float* dst, int64_t n) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = uint32_t(s[i]) << 16;
}

// x rounded to T's precision, still as fp32 (what an op producing T then read back as fp32 would see).
template <typename T>
inline void round_in_place(float* x, int64_t n) {
  if constexpr (!std::is_same_v<T, float>)
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<T>(x[i]));
}

template <>
inline void round_in_place<c10::BFloat16>(float* x, int64_t n) {
  uint32_t* u = reinterpret_cast<uint32_t*>(x);
  for (int64_t i = 0; i < n; ++i) u[i] = (u[i] + 0x7fffu + ((u[i] >> 16) & 1u)) & 0xffff0000u;
}

// src already rounded to T's precision: the conversion is exact.
template <typename T>
inline void narrow(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

template <>
inline void narrow<c10::BFloat16>(const float* src, c10::BFloat16* dst, int64_t n) {
  const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = uint16_t(s[i] >> 16);
}
