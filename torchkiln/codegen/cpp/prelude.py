"""The C++ prelude of every translation unit: integer index helpers, half/bfloat16
conversion and NaN-propagating math, written in plain C++ (no ATen headers, so a
graph compiles in well under a second)."""

PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
#ifdef _OPENMP
#include <omp.h>
#endif

static int kiln_threads = 1;
extern "C" void kiln_set_num_threads(int n) { kiln_threads = n < 1 ? 1 : n; }

static inline int64_t kiln_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t kiln_mod(int64_t a, int64_t b) {
  int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> static inline T kiln_abs(T a) { return a < 0 ? -a : a; }

static inline float kiln_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) { bits = sign; }
    else { exp = 127 - 15 + 1; while (!(man & 0x400)) { man <<= 1; exp--; } man &= 0x3ff; bits = sign | (exp << 23) | (man << 13); }
  } else if (exp == 0x1f) { bits = sign | 0x7f800000u | (man << 13); }
  else { bits = sign | ((exp + 127 - 15) << 23) | (man << 13); }
  float f; std::memcpy(&f, &bits, 4); return f;
}
static inline uint16_t kiln_f2h(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000; uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
  if (ax < 0x38800000u) {  // subnormal half or zero
    float af; std::memcpy(&af, &ax, 4);
    float scaled = af * 16777216.0f;  // 2^24
    uint32_t m = (uint32_t)std::nearbyint(scaled);
    return (uint16_t)(sign | m);
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
static inline float kiln_bf2f(uint16_t b) { uint32_t x = (uint32_t)b << 16; float f; std::memcpy(&f, &x, 4); return f; }
static inline uint16_t kiln_f2bf(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static inline float kiln_round_half(float f) { return kiln_h2f(kiln_f2h(f)); }
static inline float kiln_round_bf16(float f) { return kiln_bf2f(kiln_f2bf(f)); }

template <typename T> static inline T kiln_maximum(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <typename T> static inline T kiln_minimum(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
template <typename T> static inline T kiln_fremainder(T a, T b) {
  T r = std::fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t kiln_ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  int64_t r = 1; while (b) { if (b & 1) r *= a; a *= a; b >>= 1; } return r;
}
static inline float kiln_sin(float a) { return sinf(a); }
static inline double kiln_sin(double a) { return sin(a); }
static inline float kiln_cos(float a) { return cosf(a); }
static inline double kiln_cos(double a) { return cos(a); }
template <typename T> static inline T kiln_sign(T a) {  // branch-free; sign(nan) = 0 as ATen
  T s = a > T(0) ? T(1) : T(0); return a < T(0) ? T(-1) : s;
}
template <typename T> static inline T kiln_sigmoid(T a) { return T(1) / (T(1) + std::exp(-a)); }
"""
