"""The C++ prelude of every translation unit.

It includes no C++ headers (``<cmath>`` alone costs g++ about 0.14 s per translation
unit, more than a small graph's kernels): fixed-width integer types come from the
compiler's predefined macros, math from GCC builtins, limits from a small template.
Kernels call math as ``kiln::name(x)``, overloaded for float and double.

For float, ``kiln::exp``, ``kiln::erf``, ``kiln::tanh`` and ``kiln::sigmoid`` are
inline, branch-free approximations that GCC vectorizes inside ``omp simd`` loops
without a call (a vector call clobbers every vector register of a fused loop body):

- ``exp``: ``x = n ln2 + r`` with ``|r| <= ln2/2``, ``e^r`` by its degree-7 Taylor
  polynomial, ``2^n`` applied in two halves so results in the denormal range and the
  overflow to inf are right; within 1 ulp of the exact value (ATen's Sleef kernels:
  1 ulp).
- ``erf``: ``x P(x^2) / Q(x^2)`` on ``|x| <= 4`` (a weighted least-squares rational fit
  of degree 6/4, relative error below 1e-7 in exact arithmetic, within 6 ulp in float
  evaluation; ATen's vectorized ``erf`` is within about 5 ulp); ``+-1`` beyond.
- ``tanh``: ``x P(x^2) / Q(x^2)`` on ``|x| <= 9`` (degree 4/4, within 5 ulp; Sleef: 1 ulp); ``+-1``
  beyond.
- ``sigmoid``: ``1 / (1 + exp(-x))`` with the inline ``exp``.

All propagate NaN.  The coefficients were fitted for torchkiln (numpy least squares
against Python's ``math.erf``/``math.tanh``); tests/codegen/test_cpp_math.py checks the
error bounds and the special values.  Other float functions map to libm/libmvec
(``__builtin_*f``; see :mod:`.vecmath` for their vector variants).
"""

PRELUDE = r"""
typedef __INT64_TYPE__ int64_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT8_TYPE__ int8_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT8_TYPE__ uint8_t;

// sin and cos are called by their C names (the build passes -fno-builtin-sin*/cos*)
extern "C" float sinf(float) noexcept;
extern "C" double sin(double) noexcept;
extern "C" float cosf(float) noexcept;
extern "C" double cos(double) noexcept;

static int kiln_threads = 1;
extern "C" void kiln_set_num_threads(int n) { kiln_threads = n < 1 ? 1 : n; }

// Indirect-index checks: a kernel with checks keeps one kiln_index_error (shared by its
// OpenMP threads), records the first index outside [-size, size) ([0, size) without
// wrap: gather, scatter, index_select, embedding) and uses 0 instead,
// finishes its loops, and returns 1 after copying the error to a thread-local the
// wrapper reads with kiln_get_index_error (then raises IndexError/RuntimeError).
struct kiln_index_error { int set; int site; int64_t index; int64_t size; };
static thread_local kiln_index_error kiln_last_index_error;
__attribute__((noinline, cold)) static void kiln_index_fail(kiln_index_error* e, int64_t i, int64_t n, int site) {
  if (__atomic_exchange_n(&e->set, 1, __ATOMIC_ACQ_REL) == 0) { e->site = site; e->index = i; e->size = n; }
}
static inline int64_t kiln_check_index(int64_t i, int64_t n, int site, kiln_index_error* e, bool wrap) {
  int64_t w = wrap && i < 0 ? i + n : i;
  if (__builtin_expect(static_cast<uint64_t>(w) >= static_cast<uint64_t>(n), 0)) { kiln_index_fail(e, i, n, site); return 0; }
  return w;
}
static inline int64_t kiln_check_divisor(int64_t d, int site, kiln_index_error* e) {  // integer division
  if (__builtin_expect(d == 0, 0)) { kiln_index_fail(e, 0, 0, site); return 1; }
  return d;
}
static inline int kiln_index_report(const kiln_index_error* e) {
  if (!e->set) return 0;
  kiln_last_index_error = *e;
  return 1;
}
extern "C" void kiln_get_index_error(int64_t* out) {
  out[0] = kiln_last_index_error.site; out[1] = kiln_last_index_error.index; out[2] = kiln_last_index_error.size;
}

namespace kiln {
template <typename T> struct limits;
template <> struct limits<float> {
  static float infinity() { return __builtin_inff(); }
  static float quiet_NaN() { return __builtin_nanf(""); }
  static float lowest() { return -__FLT_MAX__; }
  static float max() { return __FLT_MAX__; }
};
template <> struct limits<double> {
  static double infinity() { return __builtin_inf(); }
  static double quiet_NaN() { return __builtin_nan(""); }
  static double lowest() { return -__DBL_MAX__; }
  static double max() { return __DBL_MAX__; }
};
#define KILN_INT_LIMITS(T, LO, HI) \
  template <> struct limits<T> { \
    static T lowest() { return LO; } static T max() { return HI; } \
    static T infinity() { return 0; } static T quiet_NaN() { return 0; } };  /* as std's */
KILN_INT_LIMITS(int64_t, -__INT64_MAX__ - 1, __INT64_MAX__)
KILN_INT_LIMITS(int32_t, -__INT32_MAX__ - 1, __INT32_MAX__)
KILN_INT_LIMITS(int16_t, -__INT16_MAX__ - 1, __INT16_MAX__)
KILN_INT_LIMITS(int8_t, -__INT8_MAX__ - 1, __INT8_MAX__)
KILN_INT_LIMITS(uint8_t, 0, __UINT8_MAX__)
KILN_INT_LIMITS(bool, false, true)

// float and double overloads, and a template that computes any other (integer)
// argument in double, as <cmath>'s integral overloads do
#define KILN_MATH1(name) \
  static inline float name(float a) { return __builtin_##name##f(a); } \
  static inline double name(double a) { return __builtin_##name(a); } \
  template <typename T> static inline double name(T a) { return __builtin_##name(static_cast<double>(a)); }
#define KILN_MATH2(name) \
  static inline float name(float a, float b) { return __builtin_##name##f(a, b); } \
  static inline double name(double a, double b) { return __builtin_##name(a, b); } \
  template <typename A, typename B> static inline double name(A a, B b) { \
    return __builtin_##name(static_cast<double>(a), static_cast<double>(b)); }
KILN_MATH1(exp2) KILN_MATH1(expm1) KILN_MATH1(log) KILN_MATH1(log2) KILN_MATH1(log10)
KILN_MATH1(log1p) KILN_MATH1(sqrt) KILN_MATH1(tan) KILN_MATH1(asin) KILN_MATH1(acos)
KILN_MATH1(atan) KILN_MATH1(sinh) KILN_MATH1(cosh) KILN_MATH1(asinh) KILN_MATH1(acosh)
KILN_MATH1(atanh) KILN_MATH1(erfc) KILN_MATH1(floor) KILN_MATH1(ceil) KILN_MATH1(nearbyint)
KILN_MATH1(trunc) KILN_MATH1(lgamma) KILN_MATH1(fabs)
KILN_MATH2(atan2) KILN_MATH2(copysign) KILN_MATH2(hypot) KILN_MATH2(fmod) KILN_MATH2(pow)
static inline float sin(float a) { return ::sinf(a); }
static inline double sin(double a) { return ::sin(a); }
template <typename T> static inline double sin(T a) { return ::sin(static_cast<double>(a)); }
static inline float cos(float a) { return ::cosf(a); }
static inline double cos(double a) { return ::cos(a); }
template <typename T> static inline double cos(T a) { return ::cos(static_cast<double>(a)); }
static inline double exp(double a) { return __builtin_exp(a); }
static inline double erf(double a) { return __builtin_erf(a); }
static inline double tanh(double a) { return __builtin_tanh(a); }
template <typename T> static inline bool signbit(T a) { return __builtin_signbit(static_cast<double>(a)); }  // ints too
template <typename T> static inline bool isinf(T a) { return __builtin_isinf(static_cast<double>(a)); }  // ints too
template <typename T> static inline bool isfinite(T a) { return __builtin_isfinite(static_cast<double>(a)); }  // ints too
template <typename T> static inline T min(T a, T b) { return b < a ? b : a; }
template <typename T> static inline T max(T a, T b) { return a < b ? b : a; }

// Horner's rule, highest coefficient first: horner(s, a, b, c) = (a s + b) s + c
template <typename... C> static inline float horner(float s, float first, C... rest) {
  float acc = first;
  ((acc = acc * s + rest), ...);
  return acc;
}
static inline float clamp(float x, float lim) { float c = x > lim ? lim : x; return c < -lim ? -lim : c; }

static inline float from_bits(int32_t x) { float f; __builtin_memcpy(&f, &x, 4); return f; }

static inline float exp(float x) {
  float c = x > 89.0f ? 89.0f : x;
  c = c < -104.0f ? -104.0f : c;
  c = (x == x) ? c : 0.0f;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float nf = (c * 1.44269504088896341f + shifter) - shifter;
  float r = c - nf * 0.693145751953125f;       // ln2 in two parts: this one exact in float
  r = r - nf * 1.42860682030941723212e-6f;
  float p = horner(r, 1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f);
  int32_t n = static_cast<int32_t>(nf);
  int32_t n1 = n >> 1, n2 = n - n1;
  float y = p * from_bits((n1 + 127) << 23) * from_bits((n2 + 127) << 23);
  return (x == x) ? y : x;
}

static inline float erf(float x) {
  float c = clamp(x, 4.0f), s = c * c;
  return c * horner(s, 1.9111241006e-08f, -1.9423871043e-06f, 1.4729854644e-04f, 3.9910489296e-03f,
                    5.1526502388e-02f, 2.0713601069e-01f, 1.1283790941e+00f)
           / horner(s, 1.0212283166e-03f, 1.4959076263e-02f, 1.1797535622e-01f, 5.1690076030e-01f, 1.0f);
}

static inline float tanh(float x) {
  float c = clamp(x, 9.0f), s = c * c;
  return c * horner(s, 1.3354889777e-08f, 2.0609289891e-05f, 3.4956030986e-03f, 1.3381039141e-01f,
                    9.9999997951e-01f)
           / horner(s, 7.7766634783e-07f, 3.2856575543e-04f, 2.5877041901e-02f, 4.6714354772e-01f, 1.0f);
}

template <typename T> static inline double exp(T a) { return __builtin_exp(static_cast<double>(a)); }
template <typename T> static inline double erf(T a) { return __builtin_erf(static_cast<double>(a)); }
template <typename T> static inline double tanh(T a) { return __builtin_tanh(static_cast<double>(a)); }
static inline float sigmoid(float a) { return 1.0f / (1.0f + kiln::exp(-a)); }
static inline double sigmoid(double a) { return 1.0 / (1.0 + kiln::exp(-a)); }
}  // namespace kiln

static inline int64_t kiln_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t kiln_mod(int64_t a, int64_t b) {
  int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> static inline T kiln_abs(T a) { return a < 0 ? -a : a; }

// Integer values wrap on overflow as ATen's kernels do (two's complement).  Signed overflow
// is undefined in C++, and GCC folds on that assumption (``abs(x) % 5`` skipped the sign
// fix-up, ``(x + 1) > x`` became true, ``x * 2 / 2`` became x): int32/int64 arithmetic
// goes through the unsigned type (narrower types through uint32_t, since their unsigned types promote to int, and wrap on the
// narrowing store).  Integer division by zero records an error (the wrapper raises
// ZeroDivisionError as eager) and divides by 1 instead of trapping; x / -1 is the wrapping
// negation (INT_MIN / -1 traps on x86).
#define KILN_WRAPPING(T, U)                                                                                 \
  static inline T kiln_wadd_##T(T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); } \
  static inline T kiln_wsub_##T(T a, T b) { return static_cast<T>(static_cast<U>(a) - static_cast<U>(b)); } \
  static inline T kiln_wmul_##T(T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); } \
  static inline T kiln_wneg_##T(T a) { return static_cast<T>(U(0) - static_cast<U>(a)); }                   \
  static inline T kiln_wabs_##T(T a) { return a < 0 ? kiln_wneg_##T(a) : a; }                               \
  static inline T kiln_idiv_##T(T a, T b) { return b == -1 ? kiln_wneg_##T(a) : a / b; }                    \
  static inline T kiln_ifmod_##T(T a, T b) { return b == -1 ? T(0) : a % b; }                               \
  static inline T kiln_ifloordiv_##T(T a, T b) {                                                            \
    if (b == -1) return kiln_wneg_##T(a);                                                                   \
    T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;                                   \
  }                                                                                                         \
  static inline T kiln_imod_##T(T a, T b) {                                                                 \
    if (b == -1) return T(0);                                                                               \
    T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;                                       \
  }
KILN_WRAPPING(int64_t, uint64_t)
KILN_WRAPPING(int32_t, uint32_t)
KILN_WRAPPING(int16_t, uint32_t)  // not uint16_t: it promotes to int, and 65535 * 65535 overflows int
KILN_WRAPPING(int8_t, uint32_t)
KILN_WRAPPING(uint8_t, uint32_t)
#undef KILN_WRAPPING

static inline float kiln_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) { bits = sign; }
    else { exp = 127 - 15 + 1; while (!(man & 0x400)) { man <<= 1; exp--; } man &= 0x3ff; bits = sign | (exp << 23) | (man << 13); }
  } else if (exp == 0x1f) { bits = sign | 0x7f800000u | (man << 13); }
  else { bits = sign | ((exp + 127 - 15) << 23) | (man << 13); }
  float f; __builtin_memcpy(&f, &bits, 4); return f;
}
static inline uint16_t kiln_f2h(float f) {
  uint32_t x; __builtin_memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000; uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
  if (ax < 0x38800000u) {  // subnormal half or zero
    float af; __builtin_memcpy(&af, &ax, 4);
    float scaled = af * 16777216.0f;  // 2^24
    uint32_t m = (uint32_t)__builtin_nearbyintf(scaled);
    return (uint16_t)(sign | m);
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
static inline float kiln_bf2f(uint16_t b) { uint32_t x = (uint32_t)b << 16; float f; __builtin_memcpy(&f, &x, 4); return f; }
static inline uint16_t kiln_f2bf(float f) {
  uint32_t x; __builtin_memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static inline float kiln_round_half(float f) { return kiln_h2f(kiln_f2h(f)); }
static inline float kiln_round_bf16(float f) { return kiln_bf2f(kiln_f2bf(f)); }

template <typename T> static inline T kiln_maximum(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <typename T> static inline T kiln_minimum(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
// Shifts as ATen's: a count < 0 or >= the type's width gives 0 (<<) or the sign (>>), where
// C++'s shift is undefined (x86 takes the count mod the width: int32 1 << 40 gave 256).
template <typename T> static inline T kiln_lshift(T a, T b) {
  return (b < 0 || static_cast<uint64_t>(b) >= sizeof(T) * 8) ? T(0) : static_cast<T>(static_cast<uint64_t>(a) << b);
}
template <typename T> static inline T kiln_rshift(T a, T b) {
  const bool out = b < 0 || static_cast<uint64_t>(b) >= sizeof(T) * 8;
  return out ? (T(-1) < T(0) ? static_cast<T>(a >> (sizeof(T) * 8 - 1)) : T(0)) : static_cast<T>(a >> b);
}
template <typename T> static inline T kiln_fremainder(T a, T b) {
  T r = kiln::fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t kiln_ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, x = static_cast<uint64_t>(a);  // wraps as ATen's
  while (b) { if (b & 1) r *= x; x *= x; b >>= 1; } return static_cast<int64_t>(r);
}
template <typename T> static inline T kiln_sign(T a) {  // branch-free; sign(nan) = 0 as ATen
  T s = a > T(0) ? T(1) : T(0); return a < T(0) ? T(-1) : s;
}
"""
