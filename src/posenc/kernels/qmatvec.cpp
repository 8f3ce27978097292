// posenc's weight-only matrix–vector product for group-quantised weights (few input rows: decoding).
//
//   y[m, n] = Σ_g  scale[n, g] · dx[m, g] · Σ_i (q[n, 32g + i] − c) · qx[m, 32g + i]
//                 + (minimum[n, g] + c · scale[n, g]) · sx[m, g],     sx = dx · Σ_i qx
//
// The weight of row n, input k is w = scale · q + minimum per group of 32 inputs (llama.cpp's GGUF blocks
// Q4_0 … Q8_0, exactly); c centres wider integers on zero (0 for ≤ 4 bits, 2^(bits−1) above). Each input
// row's group of 32 is rounded to 8-bit integers qx with one float dx = max|x| / 127 (llama.cpp's Q8
// activations) and sx = dx · Σ qx, so that y is the exact weight times the rounded input x̃ = dx · qx
// (the inner sum an integer dot product, exact in int32): |Δy| ≤ Σ_i |w_i| · dx / 2
// (tests/test_kernels.py). The rounded group's sum, not the exact Σ x, goes with the minimum: GGUF's
// weights are centred (minimum ≈ −8 · scale), and only then do the two terms' rounding errors cancel —
// with the exact sum, SmolLM2's value projections were 5× further from the float32 product.
//
// Scales: (N, G, 2) pairs (scale, minimum), float16 where every value is exactly a float16 (Q4_0, Q4_1, Q8_0:
// GGUF stores them so), float32 otherwise (K-quants' d · sc); passed as their bits, int16 or int32.
// Or (N, K / 16) float32 bits alone: a symmetric 5–8-bit weight in groups of 16, w = scale · (q − c), no
// minimum (GGUF's Q6_K: 16 values per sub-block scale; rows16).
//
// Weight layouts (made by posenc.kernels.pack):
//   bits ≤ 4: (N, K / 2) uint8, per group 16 bytes, byte j = q[j] | q[j + 16] << 4 (llama.cpp's Q4 order);
//   bits 5–8: (N, K) int8 holding q − c.
//
// AVX-512 VNNI: two groups (64 products) per _mm512_dpbusd_epi32. AVX2: 32 products per
// _mm256_maddubs_epi16 (unsigned × signed bytes, pairs summed to int16 — at most 2 · 128 · 127, no
// saturation). Without either, a plain loop computes the same integers; only the float sums' order differs.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#define POSENC_AVX2 1
#endif
#if defined(POSENC_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)
#define POSENC_AVX512 1
#endif

namespace {

constexpr int64_t GROUP = 32;

// The widest path compiled in (2 AVX-512 VNNI, 1 AVX2, 0 the plain loop); set_level picks a narrower one,
// so that one machine's tests check every path it can run.
#if defined(POSENC_AVX512)
constexpr int BEST = 2;
#elif defined(POSENC_AVX2)
constexpr int BEST = 1;
#else
constexpr int BEST = 0;
#endif
int level = BEST;

// How far ahead the weights are asked for, in bytes (rounded to whole rows, at least the next block of
// four). A block's four rows are read side by side, which hardware prefetching follows poorly: on a
// 2-core AMD EPYC (AVX-512) the 211 matrices of a SmolLM2 token streamed at 12 GB/s with 256 bytes ahead
// within the row, 26 GB/s — what a plain sum reads there — with 16 KiB ahead (8 KiB: 22, 32 KiB: 13–21).
#ifndef AHEAD
#define AHEAD 16384
#endif
// The least weight bytes (per input row) a thread takes on: SmolLM2 decoding at 2 threads, 2-core EPYC, fused
// blocks: 8.8–10.1 ms per token splitting every matrix in 64-row tasks, 7.3–8.0 with 64 KiB, 6.2–7.3 with
// 128 KiB, 6.2–6.6 with 256 KiB (1 thread: 6.2–6.7) — only the FFN's matrices and the head are split.
#ifndef TASK_BYTES
#define TASK_BYTES 262144
#endif

// One input row → qx (K int8), dx and sx (G floats each): sx = dx · Σ qx, the rounded group's sum.
// (The AVX-512 form below computes the same values: |x| max, x · (1/d) rounded to nearest even, exactly.)
void quantise_row(const float* x, int64_t K, int8_t* qx, float* dx, float* sx) {
  for (int64_t g = 0; g < K / GROUP; ++g) {
    const float* xg = x + g * GROUP;
    float amax = 0.f;
#ifdef POSENC_AVX512
    __m512 v0 = _mm512_setzero_ps(), v1 = v0;
    if (level >= 2) {
      v0 = _mm512_loadu_ps(xg), v1 = _mm512_loadu_ps(xg + 16);
      amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    } else
#endif
      for (int64_t i = 0; i < GROUP; ++i) amax = std::fmax(amax, std::fabs(xg[i]));
    const float d = amax / 127.f;
    const float inv = d > 0.f ? 1.f / d : 0.f;
    int32_t sum = 0;
#ifdef POSENC_AVX512
    if (level >= 2) {
      const __m512 s = _mm512_set1_ps(inv);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, s)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, s));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qx + g * GROUP), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qx + g * GROUP + 16), _mm512_cvtepi32_epi8(q1));
      sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    } else
#endif
      for (int64_t i = 0; i < GROUP; ++i) {
        const int8_t q = static_cast<int8_t>(std::nearbyint(xg[i] * inv));
        qx[g * GROUP + i] = q;
        sum += q;
      }
    dx[g] = d;
    sx[g] = d * static_cast<float>(sum);
  }
}

#ifdef POSENC_AVX2
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 32 weights of one group as unsigned bytes, in input order.
inline __m256i weights4(const uint8_t* w) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}

// Σ over one group of q · qx as 8 int32 partial sums, for 4-bit (unsigned) or 8-bit (signed) weights.
template <bool Wide>
inline __m256i group_dot(const uint8_t* w, const __m256i y) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (Wide) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q)), ones);
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(weights4(w), y), ones);
  }
}
#endif

#ifdef POSENC_AVX512
// Two groups' Σ q · qx as 16 int32 partial sums. _mm512_dpbusd_epi32 multiplies unsigned by signed bytes and
// adds each four products into an int32 lane (exact: no int16 step).
//   8-bit weights: 64 bytes as stored (q − c, signed), made unsigned by flipping the top bit (q − c + 128),
//   the products summed onto `lanes`: −128 × each lane's four inputs (Rows::lanes), so the sum is exactly
//   Σ (q − c) · qx; lanes 0–7 are the first group's, 8–15 the second's (mask 0xFF00).
//   4-bit weights: the 32 bytes of two groups as [low nibbles of both, high nibbles of both] — group 1's
//   inputs 0–15, group 2's 0–15, group 1's 16–31, group 2's 16–31 — with qx reordered to match once per call
//   (swap_halves); lanes 4–7 and 12–15 are the second group's (mask 0xF0F0).
inline __m512i unsigned8(const uint8_t* w) {  // 64 signed bytes + 128, as unsigned bytes
  return _mm512_xor_si512(_mm512_loadu_si512(w), _mm512_set1_epi8(static_cast<char>(0x80)));
}

template <bool Wide>
inline __m512i group_dot2(const uint8_t* w, const __m512i y, const __m512i lanes) {
  if constexpr (Wide) {
    return _mm512_dpbusd_epi32(lanes, unsigned8(w), y);
  } else {
    (void)lanes;
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, _mm512_set1_epi8(0x0F)), y);
  }
}

// qx in the order group_dot2 reads 4-bit weights: in each pair of groups the middle 16-byte blocks swapped
// (an odd last group stays as it is).
void swap_halves(const int8_t* qx, int64_t K, int8_t* out) {
  int64_t i = 0;
  for (; i + 2 * GROUP <= K; i += 2 * GROUP) {
    std::memcpy(out + i, qx + i, 16);
    std::memcpy(out + i + 16, qx + i + 32, 16);
    std::memcpy(out + i + 32, qx + i + 16, 16);
    std::memcpy(out + i + 48, qx + i + 48, 16);
  }
  std::memcpy(out + i, qx + i, K - i);
}

// Scales and minima of groups [g, g + count) of one row (count ≤ 16), as 16 floats each (zeros past count).
inline void pairs16(const uint16_t* p, int64_t count, __m512& scale, __m512& minimum) {
  const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << (2 * count)) - 1), p);
  const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(v)), hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  scale = _mm512_permutex2var_ps(lo, even, hi);
  minimum = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even, _mm512_set1_epi32(1)), hi);
}
inline void pairs16(const float* p, int64_t count, __m512& scale, __m512& minimum) {
  const int64_t first = std::min<int64_t>(count, 8), second = count - first;
  const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (2 * first)) - 1), p);
  const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (2 * second)) - 1), p + 16);
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  scale = _mm512_permutex2var_ps(lo, even, hi);
  minimum = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even, _mm512_set1_epi32(1)), hi);
}
#endif

// A stored scale or minimum as float: float32 as it is, float16 from its bits (F16C where compiled in).
inline float as_float(float v) { return v; }
inline float as_float(uint16_t h) {
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
#endif
}

// Rows [n0, n1) of the output for one input row. sm: (N, G, 2) (scale, minimum) of type S; qx2 is qx in
// the AVX-512 path's order (swap_halves for 4-bit weights, qx itself for 8-bit).
template <bool Wide, typename S>
void rows(const uint8_t* w, int64_t row_bytes, const S* sm, float c, int64_t G, const int8_t* qx,
          const int8_t* qx2, const int32_t* lanes, const float* dx, const float* sx, float* y, int64_t n0,
          int64_t n1) {
  constexpr int64_t group_bytes = Wide ? GROUP : GROUP / 2;
  int64_t n = n0;
  // prefetch the same place AHEAD bytes (whole rows, at least one block) further on
  const int64_t ahead_rows = std::max<int64_t>(4, AHEAD / row_bytes), ahead_bytes = ahead_rows * row_bytes;
  (void)ahead_bytes;
#ifdef POSENC_AVX512
  if (level >= 2) {
    // Per block of 4 rows and chunk of up to 64 groups, the float work is done 16 groups at a time first:
    // scale · dx into a small table, Σ (minimum + c · scale) · sx into a vector; the inner loop is then
    // integer dot products, one conversion and one multiply-add per two groups and row.
    constexpr int64_t CHUNK = 64;
    alignas(64) float sdx[4][CHUNK];
    const __mmask16 second = Wide ? 0xFF00 : 0xF0F0;
    for (; n + 4 <= n1; n += 4) {
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      __m512 off[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      float tail[4] = {0.f, 0.f, 0.f, 0.f};
      for (int64_t g0 = 0; g0 < G; g0 += CHUNK) {
        const int64_t g1 = std::min(G, g0 + CHUNK);
        for (int64_t g = g0; g < g1; g += 16) {
          const int64_t count = std::min<int64_t>(16, g1 - g);
          const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
          const __m512 d = _mm512_maskz_loadu_ps(mask, dx + g), sum = _mm512_maskz_loadu_ps(mask, sx + g);
          for (int r = 0; r < 4; ++r) {
            __m512 scale, minimum;
            pairs16(sm + 2 * ((n + r) * G + g), count, scale, minimum);
            // 16 groups' pairs: one cache line as float16, two as float32 (K-quants' d · sc)
            const char* next = reinterpret_cast<const char*>(sm + 2 * ((n + r + ahead_rows) * G + g));
            _mm_prefetch(next, _MM_HINT_T0);
            if constexpr (sizeof(S) == 4) _mm_prefetch(next + 64, _MM_HINT_T0);
            _mm512_store_ps(&sdx[r][g - g0], _mm512_mul_ps(scale, d));  // sdx has room past count
            off[r] = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(c), scale, minimum), sum, off[r]);
          }
        }
        int64_t g = g0;
        for (; g + 2 <= g1; g += 2) {
          const __m512i y2 = _mm512_loadu_si512(qx2 + g * GROUP);
          const __m512i l2 = Wide ? _mm512_loadu_si512(lanes + g * GROUP / 4) : _mm512_setzero_si512();
          for (int r = 0; r < 4; ++r) {
            const uint8_t* wg = w + (n + r) * row_bytes + g * group_bytes;
            _mm_prefetch(reinterpret_cast<const char*>(wg) + ahead_bytes, _MM_HINT_T0);
            const __m512 scale = _mm512_mask_blend_ps(second, _mm512_set1_ps(sdx[r][g - g0]),
                                                      _mm512_set1_ps(sdx[r][g - g0 + 1]));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(group_dot2<Wide>(wg, y2, l2)), scale, acc[r]);
          }
        }
        if (g < g1) {  // an odd last group: 256 bits, qx in its natural order there
          const __m256i y8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + g * GROUP));
          for (int r = 0; r < 4; ++r) {
            const __m256i d = group_dot<Wide>(w + (n + r) * row_bytes + g * group_bytes, y8);
            tail[r] = hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sdx[r][g - g0])));
          }
        }
      }
      for (int r = 0; r < 4; ++r) y[n + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], off[r])) + tail[r];
    }
  }
#endif
#ifdef POSENC_AVX2
  for (; level >= 1 && n + 4 <= n1; n += 4) {  // four weight rows share each activation load
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float off[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t g = 0; g < G; ++g) {
      const __m256i y8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + g * GROUP));
      for (int r = 0; r < 4; ++r) {
        const S* p = sm + 2 * ((n + r) * G + g);
        const float scale = as_float(p[0]);
        const uint8_t* wg = w + (n + r) * row_bytes + g * group_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(wg) + ahead_bytes, _MM_HINT_T0);
        const __m256i d = group_dot<Wide>(wg, y8);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(scale * dx[g]), acc[r]);
        off[r] += (as_float(p[1]) + c * scale) * sx[g];
      }
    }
    for (int r = 0; r < 4; ++r) y[n + r] = hsum(acc[r]) + off[r];
  }
#endif
  for (; n < n1; ++n) {  // the rest (and every row without AVX2)
    float total = 0.f;
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* wg = w + n * row_bytes + g * group_bytes;
      const int8_t* xg = qx + g * GROUP;
      int32_t dot = 0;
      if constexpr (Wide) {
        const int8_t* q = reinterpret_cast<const int8_t*>(wg);  // q − c, signed
        for (int64_t i = 0; i < GROUP; ++i) dot += static_cast<int32_t>(q[i]) * xg[i];
      } else {
        for (int64_t i = 0; i < GROUP / 2; ++i)
          dot += static_cast<int32_t>(wg[i] & 0x0F) * xg[i] + static_cast<int32_t>(wg[i] >> 4) * xg[i + 16];
      }
      const S* p = sm + 2 * (n * G + g);
      const float scale = as_float(p[0]);
      total += static_cast<float>(dot) * (scale * dx[g]) + (as_float(p[1]) + c * scale) * sx[g];
    }
    y[n] = total;
  }
}

#ifdef POSENC_AVX512
// Four input rows × four weight rows (AVX-512 VNNI): y[m][n + r] for m < 4, r < 4, each weight vector unpacked
// once for the four inputs and each input vector loaded once for the four weights — the long inputs of a
// prefill. Per two groups and (m, r): one dpbusd, one conversion, a multiply by dx and a multiply-add by the
// weight's scale. qx2, dx, sx, y point at input row m0 (strides K, G, G, N).
template <bool Wide, typename S>
void block4x4(const uint8_t* w, int64_t row_bytes, const S* sm, float c, int64_t G, int64_t K, const int8_t* qx2,
              const int32_t* lanes, const float* dx, const float* sx, float* y, int64_t N, int64_t n,
              int64_t ahead_bytes) {
  constexpr int64_t group_bytes = Wide ? GROUP : GROUP / 2;
  constexpr int64_t CHUNK = 64;
  alignas(64) float sw[4][CHUNK];
  const __mmask16 second = Wide ? 0xFF00 : 0xF0F0;
  __m512 acc[4][4];
  alignas(64) float off[4][4][16] = {};
  float tail[4][4] = {};
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 4; ++r) acc[m][r] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < G; g0 += CHUNK) {
    const int64_t g1 = std::min(G, g0 + CHUNK);
    for (int64_t g = g0; g < g1; g += 16) {
      const int64_t count = std::min<int64_t>(16, g1 - g);
      const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
      for (int r = 0; r < 4; ++r) {
        __m512 scale, minimum;
        pairs16(sm + 2 * ((n + r) * G + g), count, scale, minimum);
        _mm512_store_ps(&sw[r][g - g0], scale);
        const __m512 centred = _mm512_fmadd_ps(_mm512_set1_ps(c), scale, minimum);
        for (int m = 0; m < 4; ++m) {
          const __m512 sum = _mm512_maskz_loadu_ps(mask, sx + m * G + g);
          _mm512_store_ps(off[m][r], _mm512_fmadd_ps(centred, sum, _mm512_load_ps(off[m][r])));
        }
      }
    }
    int64_t g = g0;
    for (; g + 2 <= g1; g += 2) {
      __m512i ym[4], lm[4];
      __m512 dm[4];
      for (int m = 0; m < 4; ++m) {
        ym[m] = _mm512_loadu_si512(qx2 + m * K + g * GROUP);
        lm[m] = Wide ? _mm512_loadu_si512(lanes + m * (K / 4) + g * GROUP / 4) : _mm512_setzero_si512();
        dm[m] = _mm512_mask_blend_ps(second, _mm512_set1_ps(dx[m * G + g]), _mm512_set1_ps(dx[m * G + g + 1]));
      }
      for (int r = 0; r < 4; ++r) {
        const uint8_t* wg = w + (n + r) * row_bytes + g * group_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(wg) + ahead_bytes, _MM_HINT_T0);
        const __m512 sv =
            _mm512_mask_blend_ps(second, _mm512_set1_ps(sw[r][g - g0]), _mm512_set1_ps(sw[r][g - g0 + 1]));
        if constexpr (Wide) {
          const __m512i a = unsigned8(wg);
          for (int m = 0; m < 4; ++m) {
            const __m512 d = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(lm[m], a, ym[m]));
            acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(d, dm[m]), sv, acc[m][r]);
          }
        } else {
          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg));
          const __m512i a = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1),
                                             _mm512_set1_epi8(0x0F));
          for (int m = 0; m < 4; ++m) {
            const __m512 d = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), a, ym[m]));
            acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(d, dm[m]), sv, acc[m][r]);
          }
        }
      }
    }
    if (g < g1) {  // an odd last group: 256 bits, qx in its natural order there
      for (int m = 0; m < 4; ++m) {
        const __m256i y8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx2 + m * K + g * GROUP));
        for (int r = 0; r < 4; ++r) {
          const __m256i d = group_dot<Wide>(w + (n + r) * row_bytes + g * group_bytes, y8);
          tail[m][r] = hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sw[r][g - g0] * dx[m * G + g])));
        }
      }
    }
  }
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 4; ++r)
      y[m * N + n + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][r], _mm512_load_ps(off[m][r]))) + tail[m][r];
}
#endif

}  // namespace

namespace {

// Rows [n0, n1) for one input row of a symmetric 8-bit weight in groups of 16 (GGUF's Q6_K: 16 values per
// scale d · sc, w = scale · (q − c), stored as q − c; no minimum):
//   y[n] = Σ_j scale[n, j] · dx[j / 2] · Σ_{i < 16} (q − c)[n, 16j + i] · qx[16j + i]
// (the activations keep their groups of 32: two weight groups share one dx). sc: (N, K / 16) float32.
void rows16(const uint8_t* w, int64_t K, const float* sc, const int8_t* qx, const int32_t* lanes, const float* dx,
            float* y, int64_t n0, int64_t n1) {
  const int64_t G16 = K / 16;
  const int64_t ahead_rows = std::max<int64_t>(4, AHEAD / K), ahead_bytes = ahead_rows * K;
  (void)ahead_bytes;
  int64_t n = n0;
#ifdef POSENC_AVX512
  if (level >= 2) {  // four groups (two of the activations') per dpbusd; four rows share each activation load
    const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (; n + 4 <= n1; n += 4) {
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      float tail[4] = {0.f, 0.f, 0.f, 0.f};
      int64_t k = 0;
      for (; k + 2 * GROUP <= K; k += 2 * GROUP) {
        const __m512i y2 = _mm512_loadu_si512(qx + k), l2 = _mm512_loadu_si512(lanes + k / 4);
        const __m512 d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(dx[k / GROUP]), _mm512_set1_ps(dx[k / GROUP + 1]));
        for (int r = 0; r < 4; ++r) {
          const uint8_t* wk = w + (n + r) * K + k;
          _mm_prefetch(reinterpret_cast<const char*>(wk) + ahead_bytes, _MM_HINT_T0);
          if (k % 256 == 0)  // the scales of the next 256 inputs: one cache line
            _mm_prefetch(reinterpret_cast<const char*>(sc + (n + r + ahead_rows) * G16 + k / 16), _MM_HINT_T0);
          const __m512 s = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(sc + (n + r) * G16 + k / 16)));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(group_dot2<true>(wk, y2, l2)), _mm512_mul_ps(s, d), acc[r]);
        }
      }
      if (k < K) {  // an odd last group of 32: two weight groups
        const __m256i y8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + k));
        for (int r = 0; r < 4; ++r) {
          const float* s = sc + (n + r) * G16 + k / 16;
          const __m256 scale = _mm256_set_m128(_mm_set1_ps(s[1] * dx[k / GROUP]), _mm_set1_ps(s[0] * dx[k / GROUP]));
          tail[r] = hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(group_dot<true>(w + (n + r) * K + k, y8)), scale));
        }
      }
      for (int r = 0; r < 4; ++r) y[n + r] = _mm512_reduce_add_ps(acc[r]) + tail[r];
    }
  }
#endif
#ifdef POSENC_AVX2
  for (; level >= 1 && n + 4 <= n1; n += 4) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t k = 0; k < K; k += GROUP) {
      const __m256i y8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + k));
      for (int r = 0; r < 4; ++r) {
        const uint8_t* wk = w + (n + r) * K + k;
        _mm_prefetch(reinterpret_cast<const char*>(wk) + ahead_bytes, _MM_HINT_T0);
        const float* s = sc + (n + r) * G16 + k / 16;
        const __m256 scale = _mm256_set_m128(_mm_set1_ps(s[1] * dx[k / GROUP]), _mm_set1_ps(s[0] * dx[k / GROUP]));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(group_dot<true>(wk, y8)), scale, acc[r]);
      }
    }
    for (int r = 0; r < 4; ++r) y[n + r] = hsum(acc[r]);
  }
#endif
  for (; n < n1; ++n) {  // the rest (and every row without AVX2)
    float total = 0.f;
    const int8_t* q = reinterpret_cast<const int8_t*>(w + n * K);
    for (int64_t j = 0; j < G16; ++j) {
      int32_t dot = 0;
      for (int64_t i = 16 * j; i < 16 * j + 16; ++i) dot += static_cast<int32_t>(q[i]) * qx[i];
      total += static_cast<float>(dot) * (sc[n * G16 + j] * dx[j / 2]);
    }
    y[n] = total;
  }
}

// A few input rows rounded once for every matrix that reads them (q, k and v read the same normed row).
struct Rows {
  int64_t M = 0, K = 0;
  std::vector<int8_t> qx, swapped;  // swapped: qx in the AVX-512 path's 4-bit order (empty when not used)
  std::vector<int32_t> lanes;       // the AVX-512 path's 8-bit start: −128 × the sum of each 4 of qx (K / 4 per row)
  std::vector<float> dx, sx;
  Rows(const float* x, int64_t m, int64_t k) : M(m), K(k), qx(m * k), dx(m * (k / GROUP)), sx(m * (k / GROUP)) {
    const int64_t G = K / GROUP;
#ifdef POSENC_AVX512
    if (level >= 2) swapped.resize(M * K), lanes.resize(M * (K / 4));
#endif
    at::parallel_for(0, M, 64, [&](int64_t m0, int64_t m1) {  // a prefill's thousands of rows: split too
      for (int64_t i = m0; i < m1; ++i) {
        quantise_row(x + i * K, K, &qx[i * K], &dx[i * G], &sx[i * G]);
#ifdef POSENC_AVX512
        if (!swapped.empty()) {
          swap_halves(&qx[i * K], K, &swapped[i * K]);
          for (int64_t j = 0; j < K / 4; ++j) {
            const int8_t* q4 = &qx[i * K + 4 * j];
            lanes[i * (K / 4) + j] = -128 * (q4[0] + q4[1] + q4[2] + q4[3]);
          }
        }
#endif
      }
    });
  }
};

// One quantised matrix as the kernel reads it (checked by check_weight).
struct Weight {
  const uint8_t* w;
  const void* sm;
  const float* bias;
  int64_t N, K, row_bytes, bits;
  bool half;
  bool group16;  // symmetric 8-bit in groups of 16 (rows16), scales (N, K / 16) float32
};

Weight check_weight(const torch::Tensor& weight, const torch::Tensor& scales, int64_t bits,
                    const c10::optional<torch::Tensor>& bias, int64_t K) {
  TORCH_CHECK(1 <= bits && bits <= 8, "bits must be 1–8, got ", bits);
  const bool wide = bits > 4;
  TORCH_CHECK(K % GROUP == 0, "K must be a multiple of 32, got ", K);
  const int64_t N = weight.size(0), G = K / GROUP;
  TORCH_CHECK(weight.is_contiguous() && weight.dim() == 2 && weight.size(1) == (wide ? K : K / 2) &&
                  weight.scalar_type() == (wide ? torch::kInt8 : torch::kUInt8),
              "weight must be contiguous (N, ", wide ? K : K / 2, ") ", wide ? "int8" : "uint8");
  const bool half = scales.scalar_type() == torch::kInt16, group16 = scales.dim() == 2;
  if (group16) {
    TORCH_CHECK(wide && scales.is_contiguous() && scales.size(0) == N && scales.size(1) == K / 16 &&
                    scales.scalar_type() == torch::kInt32,
                "symmetric groups of 16 (2-D scales) take 5–8-bit weights and (N, K/16) float32 scales as int32 bits");
  } else {
    TORCH_CHECK(scales.is_contiguous() && scales.dim() == 3 && scales.size(0) == N && scales.size(1) == G &&
                    scales.size(2) == 2 && (half || scales.scalar_type() == torch::kInt32),
                "scales must be contiguous (N, K/32, 2), the bits of float16 (int16) or float32 (int32); or (N, K/16) "
                "float32 bits for symmetric groups of 16");
  }
  const float* b = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == torch::kFloat32 && bias->is_contiguous() && bias->numel() == N,
                "bias must be a contiguous (N) float32 tensor");
    b = bias->data_ptr<float>();
  }
  return {reinterpret_cast<const uint8_t*>(weight.data_ptr()), scales.data_ptr(), b, N, K, weight.size(1), bits, half,
          group16};
}

// Weight rows [n0, n1) of y (M, N) = the rounded rows × the weight (+ bias), on the calling thread.
void multiply_rows(const Rows& x, const Weight& wt, float* y, int64_t n0, int64_t n1) {
  const bool wide = wt.bits > 4;
  const int64_t M = x.M, K = x.K, N = wt.N, G = K / GROUP;
  const int8_t* qx2 = (wide || x.swapped.empty()) ? x.qx.data() : x.swapped.data();
  const float c = wide ? static_cast<float>(int64_t{1} << (wt.bits - 1)) : 0.f;
  const auto* half = static_cast<const uint16_t*>(wt.sm);
  const auto* full = static_cast<const float*>(wt.sm);
  // weight rows [na, nb) for input row m
  auto one = [&](int64_t m, int64_t na, int64_t nb) {
    const int8_t *q = &x.qx[m * K], *q2 = qx2 + m * K;
    const int32_t* l = x.lanes.empty() ? nullptr : &x.lanes[m * (K / 4)];
    const float *d = &x.dx[m * G], *s = &x.sx[m * G];
    float* ym = y + m * N;
    if (wt.group16) rows16(wt.w, K, full, q, l, d, ym, na, nb);
    else if (wide && wt.half) rows<true>(wt.w, wt.row_bytes, half, c, G, q, q2, l, d, s, ym, na, nb);
    else if (wide) rows<true>(wt.w, wt.row_bytes, full, c, G, q, q2, l, d, s, ym, na, nb);
    else if (wt.half) rows<false>(wt.w, wt.row_bytes, half, c, G, q, q2, l, d, s, ym, na, nb);
    else rows<false>(wt.w, wt.row_bytes, full, c, G, q, q2, l, d, s, ym, na, nb);
  };
  {
    int64_t m = 0;
#ifdef POSENC_AVX512
    if (level >= 2 && M >= 4 && !wt.group16) {  // blocks of four inputs × four weight rows; what is left row by row
      const int64_t ahead = std::max<int64_t>(4, AHEAD / wt.row_bytes) * wt.row_bytes;
      const int64_t n4 = n0 + (n1 - n0) / 4 * 4;
      for (; m + 4 <= M; m += 4) {
        const int8_t* q2 = qx2 + m * K;
        const int32_t* l = &x.lanes[m * (K / 4)];
        const float *d = &x.dx[m * G], *s = &x.sx[m * G];
        float* ym = y + m * N;
        for (int64_t n = n0; n < n4; n += 4) {
          if (wide && wt.half) block4x4<true>(wt.w, wt.row_bytes, half, c, G, K, q2, l, d, s, ym, N, n, ahead);
          else if (wide) block4x4<true>(wt.w, wt.row_bytes, full, c, G, K, q2, l, d, s, ym, N, n, ahead);
          else if (wt.half) block4x4<false>(wt.w, wt.row_bytes, half, c, G, K, q2, l, d, s, ym, N, n, ahead);
          else block4x4<false>(wt.w, wt.row_bytes, full, c, G, K, q2, l, d, s, ym, N, n, ahead);
        }
        if (n4 < n1)
          for (int64_t i = 0; i < 4; ++i) one(m + i, n4, n1);
      }
    }
#endif
    for (; m < M; ++m) one(m, n0, n1);
    if (wt.bias)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = n0; n < n1; ++n) y[i * N + n] += wt.bias[n];
  }
}

// y (M, N) = the rounded rows × the weight (+ bias), rows split over threads.
void multiply(const Rows& x, const Weight& wt, float* y) {
  // each task takes whole blocks of rows, so that a worker's weights stay in its cache across the M inputs, and
  // at least TASK_BYTES of them for one input row: a decoding step's small matrices are microseconds of work,
  // less than handing half of it to another thread costs (a fused decoding step splits every matrix instead:
  // its threads stay in one parallel region, decode_blocks below)
  const int64_t G = x.K / GROUP, scale_bytes = wt.group16 ? 4 * (x.K / 16) : 2 * G;
  const int64_t grain = std::max<int64_t>(64, TASK_BYTES / std::max<int64_t>(1, x.M * (wt.row_bytes + scale_bytes)));
  at::parallel_for(0, wt.N, grain, [&](int64_t n0, int64_t n1) { multiply_rows(x, wt, y, n0, n1); });
}

}  // namespace

// x (…, K) float32, contiguous; weight (N, K/2) uint8 or (N, K) int8; scales (N, K/32, 2) (scale, minimum)
// as the bits of float32 (int32) or float16 (int16); bias (N) float32 or None → (…, N) float32.
torch::Tensor matvec(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& scales,
                     int64_t bits, const c10::optional<torch::Tensor>& bias) {
  TORCH_CHECK(x.dim() >= 1 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous (…, K) float32 tensor");
  const int64_t K = x.size(-1), M = K ? x.numel() / K : 0;
  const Weight wt = check_weight(weight, scales, bits, bias, K);
  auto shape = x.sizes().vec();
  shape.back() = wt.N;
  auto out = torch::empty(shape, x.options());
  multiply(Rows(x.data_ptr<float>(), M, K), wt, out.data_ptr<float>());
  return out;
}

namespace {

// One row of the stored weight, w = scale · q + minimum per group (two roundings: a multiply, then an add —
// the order of GGUF's dequantisers and of GroupQuant.dequantize; no fused multiply-add, -ffp-contract=off),
// into out as float32 or rounded to bfloat16 (nearest even, as torch's .to(bfloat16)).
template <typename S, typename O>
void dequantise_row(const Weight& wt, int64_t n, O* out) {
  const int64_t K = wt.K;
  const uint8_t* w = wt.w + n * wt.row_bytes;
  float buf[GROUP];
  if (wt.group16) {  // q − c stored as int8, one scale per 16, minimum = −c · scale
    const float* sc = static_cast<const float*>(wt.sm) + n * (K / 16);
    const float c = static_cast<float>(1 << (wt.bits - 1));
    for (int64_t j = 0; j < K / 16; ++j) {
      const float scale = sc[j], minimum = scale * -c;
      for (int64_t i = 0; i < 16; ++i)
        buf[i] = static_cast<float>(static_cast<int8_t>(w[16 * j + i]) + static_cast<int>(c)) * scale + minimum;
      for (int64_t i = 0; i < 16; ++i) out[16 * j + i] = static_cast<O>(buf[i]);
    }
    return;
  }
  const S* sm = static_cast<const S*>(wt.sm) + n * (K / GROUP) * 2;
  const int c = wt.bits > 4 ? 1 << (wt.bits - 1) : 0;
  for (int64_t g = 0; g < K / GROUP; ++g) {
    const float scale = as_float(sm[2 * g]), minimum = as_float(sm[2 * g + 1]);
    if (wt.bits <= 4) {
      const uint8_t* b = w + g * (GROUP / 2);
      for (int64_t i = 0; i < GROUP / 2; ++i) {
        buf[i] = static_cast<float>(b[i] & 15) * scale + minimum;
        buf[i + GROUP / 2] = static_cast<float>(b[i] >> 4) * scale + minimum;
      }
    } else {
      const int8_t* b = reinterpret_cast<const int8_t*>(w) + g * GROUP;
      for (int64_t i = 0; i < GROUP; ++i) buf[i] = static_cast<float>(b[i] + c) * scale + minimum;
    }
    for (int64_t i = 0; i < GROUP; ++i) out[g * GROUP + i] = static_cast<O>(buf[i]);
  }
}

#ifdef POSENC_AVX512
// 16 floats stored as they are, or rounded to bfloat16 to nearest even as c10::BFloat16 rounds finite values
// (bits + 0x7FFF + the kept part's lowest bit, then the top 16 bits).
inline void store16(float* out, __m512 v) { _mm512_storeu_ps(out, v); }
inline void store16(at::BFloat16* out, __m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
}

// scale · q + minimum for 16 integers (a multiply, then an add: the same roundings as dequantise_row).
inline __m512 affine16(__m512i q, __m512 scale, __m512 minimum) {
  return _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q), scale), minimum);
}

// dequantise_row, 16 values at a time (level 2).
template <typename S, typename O>
void dequantise_row512(const Weight& wt, int64_t n, O* out) {
  const int64_t K = wt.K;
  const uint8_t* w = wt.w + n * wt.row_bytes;
  if (wt.group16) {
    const float* sc = static_cast<const float*>(wt.sm) + n * (K / 16);
    const float c = static_cast<float>(1 << (wt.bits - 1));
    const __m512i ci = _mm512_set1_epi32(1 << (wt.bits - 1));
    for (int64_t j = 0; j < K / 16; ++j) {
      const __m512i q = _mm512_add_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * j))), ci);
      store16(out + 16 * j, affine16(q, _mm512_set1_ps(sc[j]), _mm512_set1_ps(sc[j] * -c)));
    }
    return;
  }
  const S* sm = static_cast<const S*>(wt.sm) + n * (K / GROUP) * 2;
  const __m512i ci = _mm512_set1_epi32(wt.bits > 4 ? 1 << (wt.bits - 1) : 0), low = _mm512_set1_epi32(15);
  for (int64_t g = 0; g < K / GROUP; ++g) {
    const __m512 scale = _mm512_set1_ps(as_float(sm[2 * g])), minimum = _mm512_set1_ps(as_float(sm[2 * g + 1]));
    __m512i a, b;
    if (wt.bits <= 4) {
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + g * (GROUP / 2))));
      a = _mm512_and_si512(v, low);
      b = _mm512_srli_epi32(v, 4);
    } else {
      const __m128i* p = reinterpret_cast<const __m128i*>(w + g * GROUP);
      a = _mm512_add_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(p)), ci);
      b = _mm512_add_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(p + 1)), ci);
    }
    store16(out + g * GROUP, affine16(a, scale, minimum));
    store16(out + g * GROUP + 16, affine16(b, scale, minimum));
  }
}
#endif

template <typename S, typename O>
void dequantise_one(const Weight& wt, int64_t n, O* out) {
#ifdef POSENC_AVX512
  if (level >= 2) return dequantise_row512<S>(wt, n, out);
#endif
  dequantise_row<S>(wt, n, out);
}

template <typename O>
void dequantise_rows(const Weight& wt, int64_t n0, int64_t n1, O* out) {
  at::parallel_for(n0, n1, std::max<int64_t>(16, TASK_BYTES / (4 * wt.K)), [&](int64_t a, int64_t b) {
    for (int64_t n = a; n < b; ++n) {
      if (wt.group16 || !wt.half)
        dequantise_one<float>(wt, n, out + (n - n0) * wt.K);
      else
        dequantise_one<uint16_t>(wt, n, out + (n - n0) * wt.K);
    }
  });
}

}  // namespace

// Rows [n0, n1) of the stored weight as a float matrix: (n1 − n0, K) float32, or bfloat16 when bf16 — the
// exact weight for a product of many rows (BLAS), without forming the integers and scales as tensors first.
torch::Tensor dequantise(const torch::Tensor& weight, const torch::Tensor& scales, int64_t bits, int64_t n0,
                         int64_t n1, bool bf16) {
  const bool wide = bits > 4;
  const int64_t K = weight.dim() == 2 ? weight.size(1) * (wide ? 1 : 2) : 0;
  const Weight wt = check_weight(weight, scales, bits, c10::nullopt, K);
  TORCH_CHECK(0 <= n0 && n0 <= n1 && n1 <= wt.N, "rows [", n0, ", ", n1, ") outside the weight's ", wt.N, " rows");
  auto out = torch::empty({n1 - n0, K}, torch::TensorOptions().dtype(bf16 ? torch::kBFloat16 : torch::kFloat32));
  if (bf16)
    dequantise_rows(wt, n0, n1, out.data_ptr<at::BFloat16>());
  else
    dequantise_rows(wt, n0, n1, out.data_ptr<float>());
  return out;
}

// The integers the kernel multiplies by: x (M, K) float32 → (qx (M, K) int8, dx (M, K/32), sx (M, K/32)).
std::vector<torch::Tensor> quantise(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.size(1) % GROUP == 0,
              "x must be a contiguous (M, K) float32 tensor with K a multiple of 32");
  const int64_t M = x.size(0), K = x.size(1), G = K / GROUP;
  auto qx = torch::empty({M, K}, x.options().dtype(torch::kInt8));
  auto dx = torch::empty({M, G}, x.options()), sx = torch::empty({M, G}, x.options());
  for (int64_t m = 0; m < M; ++m)
    quantise_row(x.data_ptr<float>() + m * K, K, qx.data_ptr<int8_t>() + m * K, dx.data_ptr<float>() + m * G,
                 sx.data_ptr<float>() + m * G);
  return {qx, dx, sx};
}

namespace {

// One row of rms_norm (below).
void norm_row(const float* xr, const float* w, int64_t D, float eps, float* yr) {
  int64_t i = 0;
  float ss = 0.f;
#ifdef POSENC_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= D; i += 8) {
    const __m256 v = _mm256_loadu_ps(xr + i);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
  }
  ss = hsum(acc);
#endif
  for (; i < D; ++i) ss += xr[i] * xr[i];
  const float inv = 1.f / std::sqrt(ss / static_cast<float>(D) + eps);
  for (int64_t j = 0; j < D; ++j) yr[j] = w[j] * (xr[j] * inv);
}

// One head's rotation (rope, below): Dh/2 pairs by the row's cos and sin.
void rotate_row(const float* xr, const float* c, const float* sn, int64_t Dh, bool half, float* yr) {
  const int64_t P = Dh / 2;
  for (int64_t i = 0; i < P; ++i) {
    const int64_t ia = half ? i : 2 * i, ib = half ? i + P : 2 * i + 1;
    const float a = xr[ia], b = xr[ib];
    yr[ia] = a * c[i] + b * -sn[i];
    yr[ib] = b * c[i] + a * sn[i];
  }
}

}  // namespace

// x (…, D) float32 / rms(x) · weight, rms over the last dim: F.rms_norm(x, eps=eps) then weight · that, as
// posenc's RMSNorm computes it (two roundings, no fused multiply-add: built with -ffp-contract=off); the sum of
// squares in eight float lanes. Rows are split between threads from 64 KiB of them up (a prefill's); each row's
// sum has one order whatever the thread count.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() >= 1 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous (…, D) float32 tensor");
  const int64_t D = x.size(-1), R = D ? x.numel() / D : 0;
  TORCH_CHECK(weight.scalar_type() == torch::kFloat32 && weight.is_contiguous() && weight.numel() == D,
              "weight must be a contiguous (D) float32 tensor");
  auto out = torch::empty_like(x);
  const float *xp = x.data_ptr<float>(), *w = weight.data_ptr<float>();
  float* y = out.data_ptr<float>();
  at::parallel_for(0, R, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, D)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) norm_row(xp + r * D, w, D, static_cast<float>(eps), y + r * D);
  });
  return out;
}

// RoPE of a decoding step: x (B, H, T, Dh) or (T, Dh) float32, contiguous; cos, sin (T, Dh/2) or (B, 1, T, Dh/2).
// Each pair (a, b) — (i, i + Dh/2) for "half" pairing, (2i, 2i + 1) interleaved — becomes
// (a·cos − b·sin, b·cos + a·sin), each product and sum rounded once (-ffp-contract=off): bit for bit
// posenc.positions.rotary's reference.
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool half) {
  TORCH_CHECK((x.dim() == 4 || x.dim() == 2) && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous (B, H, T, Dh) or (T, Dh) float32 tensor");
  const int64_t Dh = x.size(-1), P = Dh / 2, T = x.size(-2), H = x.dim() == 4 ? x.size(1) : 1;
  const bool shared = cos.dim() == 2;
  TORCH_CHECK(Dh % 2 == 0 && cos.sizes() == sin.sizes() && cos.scalar_type() == torch::kFloat32 &&
                  sin.scalar_type() == torch::kFloat32 && cos.is_contiguous() && sin.is_contiguous() &&
                  cos.size(-1) == P && cos.size(-2) == T &&
                  (shared || (cos.dim() == 4 && x.dim() == 4 && cos.size(0) == x.size(0) && cos.size(1) == 1)),
              "cos and sin must be contiguous float32 (T, Dh/2), or (B, 1, T, Dh/2) for a 4-D x");
  auto out = torch::empty_like(x);
  const float *xp = x.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float* y = out.data_ptr<float>();
  const int64_t rows = Dh ? x.numel() / Dh : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % T, crow = shared ? t : (r / (H * T)) * T + t;
    const float *c = cp + crow * P, *sn = sp + crow * P, *xr = xp + r * Dh;
    float* yr = y + r * Dh;
    rotate_row(xr, c, sn, Dh, half, yr);
  }
  return out;
}

namespace {

// Σ a[i] · b[i] in float32 (eight lanes with AVX2, then the rest).
inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float total = 0.f;
#ifdef POSENC_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  total = hsum(acc);
#endif
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// A matrix of decode_block: quantised (bits 1–8, the kernel's layout) or float32 (bits 0: (N, K) as the file
// gave it in a type the kernel does not take, e.g. GGUF's Q6_K), multiplied the way posenc's modules do:
// the kernel's product, or float32 dot products (F.linear's, summed in another order).
struct Mat {
  Weight q{};
  const float* f = nullptr;
  const float* bias = nullptr;
  int64_t N = 0, K = 0;

  // outputs [n0, n1) of y = x · Wᵀ (+ bias), on the calling thread
  void run_rows(const float* x, const Rows& rows, float* y, int64_t n0, int64_t n1) const {
    if (!f) return multiply_rows(rows, q, y, n0, n1);
    for (int64_t n = n0; n < n1; ++n) {
      const float d = dot(f + n * K, x, K);
      y[n] = bias ? d + bias[n] : d;
    }
  }
};

Mat check_mat(const torch::Tensor& weight, const torch::Tensor& scales, int64_t bits,
              const c10::optional<torch::Tensor>& bias, int64_t K) {
  if (bits != 0) {
    Mat m;
    m.q = check_weight(weight, scales, bits, bias, K);
    m.N = m.q.N, m.K = K;
    return m;
  }
  TORCH_CHECK(weight.is_contiguous() && weight.dim() == 2 && weight.size(1) == K &&
                  weight.scalar_type() == torch::kFloat32, "a float weight (bits 0) must be contiguous (N, ", K,
              ") float32");
  Mat m;
  m.f = weight.data_ptr<float>(), m.N = weight.size(0), m.K = K;
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == torch::kFloat32 && bias->is_contiguous() && bias->numel() == m.N,
                "bias must be a contiguous (N) float32 tensor");
    m.bias = bias->data_ptr<float>();
  }
  return m;
}

}  // namespace

// A decoder block's decoding step — one sequence, one new token — with its weights checked once
// (posenc.models.fused builds one per block and runs a whole token's blocks in one call, decode_blocks).
// Pre-norm (Llama: two norms) or sandwich (Gemma: four, a norm before and after each branch):
//   h = n₁(x); q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ (+ biases); optionally each head's q and k normed (QK-norm);
//   q, k rotated by cos/sin (RoPE, every pair); k, v written at `index` of the cache buffers; each query head
//   attends, softmax(q·kᵀ · scale) · v, to the keys [start, index] of its key/value head (grouped-query:
//   H / Hkv query heads per kv head); a = o·Woᵀ; x₁ = x + a (sandwich: x + n₂(a));
//   f = down(act(gate(n(x₁))) · up(n(x₁))), act SiLU (0) or tanh-GELU (1);
//   out = x₁ + f (sandwich: x₁ + n₄(f)).
// The norms' weights are what multiplies x/rms(x) (Gemma's 1 + g, formed by the caller). The same arithmetic as
// posenc's modules on this kernel (RMSNorm, rope, matvec above), except attention and the activations, which
// round differently from PyTorch's (float32 sums in another order, std::exp, std::tanh): ulp-level.
//   weights, scales, bits, biases: q, k, v, o, gate, up, down (bits 0: a float32 (N, K) weight, scales unused);
//   norms, eps: two or four; qk_norms: none or two. The block keeps references to every tensor it reads.
struct Block {
  std::vector<torch::Tensor> keep;  // the tensors below point into
  Mat w[7];                         // q, k, v, o, gate, up, down
  std::vector<const float*> norm_w;
  std::vector<float> eps;
  const float* qk_w[2] = {nullptr, nullptr};
  float qk_eps = 0.f, scale = 0.f;
  bool sandwich = false, half = false;
  int64_t activation = 0, D = 0, QD = 0, H = 0, Hkv = 0, Dh = 0, Fw = 0;

  Block(const std::vector<torch::Tensor>& norms, const std::vector<double>& eps_, const std::vector<torch::Tensor>& weights,
        const std::vector<torch::Tensor>& scales, const std::vector<int64_t>& bits,
        const std::vector<c10::optional<torch::Tensor>>& biases, const std::vector<torch::Tensor>& qk_norms,
        double qk_eps_, int64_t head_dim, bool half_, double scale_, int64_t activation_) {
    sandwich = norms.size() == 4;
    TORCH_CHECK((norms.size() == 2 || sandwich) && eps_.size() == norms.size() && weights.size() == 7 &&
                    scales.size() == 7 && bits.size() == 7 && biases.size() == 7,
                "two or four norms and seven matrices (q, k, v, o, gate, up, down)");
    TORCH_CHECK(activation_ == 0 || activation_ == 1, "activation: 0 (SiLU) or 1 (tanh-GELU), got ", activation_);
    TORCH_CHECK(!norms.empty() && norms[0].dim() == 1, "norm weights: (D) float32");
    D = norms[0].numel(), Dh = head_dim;
    for (const auto& n : norms)
      TORCH_CHECK(n.scalar_type() == torch::kFloat32 && n.is_contiguous() && n.numel() == D,
                  "norm weights: (D) float32");
    TORCH_CHECK(Dh > 0 && Dh % 2 == 0, "head_dim must be even and positive, got ", Dh);
    TORCH_CHECK(qk_norms.empty() || qk_norms.size() == 2, "qk_norms: none, or the query and key norms' weights");
    for (const auto& n : qk_norms)
      TORCH_CHECK(n.scalar_type() == torch::kFloat32 && n.is_contiguous() && n.numel() == Dh,
                  "QK-norm weights: (Dh) float32");
    for (int i = 0; i < 3; ++i) w[i] = check_mat(weights[i], scales[i], bits[i], biases[i], D);
    QD = w[0].N, H = QD / Dh, Hkv = w[1].N / Dh;
    TORCH_CHECK(QD % Dh == 0 && Hkv > 0 && H % Hkv == 0 && w[1].N == Hkv * Dh && w[2].N == Hkv * Dh,
                "q must give H·Dh and k, v Hkv·Dh outputs, H a multiple of Hkv");
    w[3] = check_mat(weights[3], scales[3], bits[3], biases[3], QD);
    TORCH_CHECK(w[3].N == D, "o must give D outputs");
    for (int i = 4; i < 6; ++i) w[i] = check_mat(weights[i], scales[i], bits[i], biases[i], D);
    TORCH_CHECK(w[4].N == w[5].N, "gate and up must have one width");
    Fw = w[4].N;
    w[6] = check_mat(weights[6], scales[6], bits[6], biases[6], Fw);
    TORCH_CHECK(w[6].N == D, "down must give D outputs");
    for (const auto* list : {&norms, &weights, &scales, &qk_norms}) keep.insert(keep.end(), list->begin(), list->end());
    for (const auto& b : biases)
      if (b.has_value()) keep.push_back(*b);
    for (size_t i = 0; i < norms.size(); ++i) norm_w.push_back(norms[i].data_ptr<float>());
    for (double e : eps_) eps.push_back(static_cast<float>(e));
    for (size_t i = 0; i < qk_norms.size(); ++i) qk_w[i] = qk_norms[i].data_ptr<float>();
    qk_eps = static_cast<float>(qk_eps_), half = half_, scale = static_cast<float>(scale_), activation = activation_;
  }
};

// One block's decoding step as thread t of nt runs it: each product's output rows, the heads, the activations
// split into nt contiguous parts, a barrier (sync) wherever a step reads what another thread wrote, the small
// serial steps (norms, residuals, rounding a product's input) on thread 0. Every output is computed by one
// thread in one order, so the result does not depend on nt. xp → y (D floats each, not the same).
struct Shared {  // the buffers every thread of a step reads and writes (sized for the widest block)
  std::vector<float> h, qkv, q, att, x1, gu;
  std::optional<Rows> rows;  // the input of the products at hand, rounded once for all threads
};

template <typename Sync>
void block_step(const Block& b, const float* xp, float* y, const float* c, const float* sn, float* kb, float* vb,
                int64_t capacity, int64_t start, int64_t index, Shared& sh, std::vector<float>& tmp,
                std::vector<float>& p, int t, int nt, const Sync& sync) {
  const int64_t D = b.D, QD = b.QD, H = b.H, Hkv = b.Hkv, Dh = b.Dh, Fw = b.Fw;
  const int64_t T = index - start + 1, group = H / Hkv;
  float *h = sh.h.data(), *qkv = sh.qkv.data(), *q = sh.q.data(), *att = sh.att.data(), *x1 = sh.x1.data(),
        *gu = sh.gu.data();
  const auto part = [&](int64_t n, int64_t i) {  // part i of n outputs: whole blocks of 16 rows
    return i >= nt ? n : std::min(n, (n * i / nt) / 16 * 16);
  };
  const auto product = [&](const Mat& m, const float* in, float* o) {
    m.run_rows(in, *sh.rows, o, part(m.N, t), part(m.N, t + 1));
  };
  const auto share = [&](int64_t n, int64_t& lo, int64_t& hi) { lo = n * t / nt, hi = n * (t + 1) / nt; };
  const auto norm = [&](size_t i, const float* in, float* out) { norm_row(in, b.norm_w[i], D, b.eps[i], out); };
  // out = base + branch (sandwich: base + norm i of the branch, formed in h, free by then)
  const auto residual = [&](size_t i, const float* base, const float* branch, float* out) {
    if (b.sandwich) norm(i, branch, h), branch = h;
    for (int64_t j = 0; j < D; ++j) out[j] = base[j] + branch[j];
  };
  int64_t lo, hi;
  if (t == 0) {
    norm(0, xp, h);
    sh.rows.emplace(h, 1, D);
  }
  sync();
  product(b.w[0], h, qkv);
  product(b.w[1], h, qkv + QD);
  product(b.w[2], h, qkv + QD + Hkv * Dh);
  sync();
  share(H + Hkv, lo, hi);  // each head's QK-norm, rotation and cache write
  for (int64_t hd = lo; hd < hi; ++hd) {
    float* v = qkv + hd * Dh;
    if (b.qk_w[0]) {  // each head's query and key normed before the rotation
      norm_row(v, b.qk_w[hd < H ? 0 : 1], Dh, b.qk_eps, tmp.data());
      std::memcpy(v, tmp.data(), Dh * sizeof(float));
    }
    if (hd < H) {
      rotate_row(v, c, sn, Dh, b.half, q + hd * Dh);
    } else {
      const int64_t kv = hd - H;
      rotate_row(v, c, sn, Dh, b.half, kb + (kv * capacity + index) * Dh);
      std::memcpy(vb + (kv * capacity + index) * Dh, qkv + QD + (Hkv + kv) * Dh, Dh * sizeof(float));
    }
  }
  sync();
  share(H, lo, hi);  // attention, heads split
  for (int64_t hd = lo; hd < hi; ++hd) {
    const float* qh = q + hd * Dh;
    const float* kh = kb + ((hd / group) * capacity + start) * Dh;
    const float* vh = vb + ((hd / group) * capacity + start) * Dh;
    float top = -INFINITY;
    for (int64_t s = 0; s < T; ++s) {
      p[s] = dot(qh, kh + s * Dh, Dh) * b.scale;
      top = std::max(top, p[s]);
    }
    float total = 0.f;
    for (int64_t s = 0; s < T; ++s) total += (p[s] = std::exp(p[s] - top));
    float* o = att + hd * Dh;
    std::fill(o, o + Dh, 0.f);
    for (int64_t s = 0; s < T; ++s) {
      const float a = p[s] / total, *vt = vh + s * Dh;
      for (int64_t i = 0; i < Dh; ++i) o[i] += a * vt[i];
    }
  }
  sync();
  if (t == 0) sh.rows.emplace(att, 1, QD);
  sync();
  product(b.w[3], att, x1);
  sync();
  if (t == 0) {
    residual(1, xp, x1, x1);
    norm(b.sandwich ? 2 : 1, x1, h);
    sh.rows.emplace(h, 1, D);
  }
  sync();
  product(b.w[4], h, gu);
  product(b.w[5], h, gu + Fw);
  sync();
  share(Fw, lo, hi);
  for (int64_t i = lo; i < hi; ++i) {
    const float g = gu[i];
    float act;
    if (b.activation == 0) {
      act = g / (1.f + std::exp(-g));
    } else {  // PyTorch's gelu(approximate="tanh"): 0.5 · g · (1 + tanh(√(2/π) · (g + 0.044715 · g³)))
      const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
      const float inner = beta * (g + kappa * g * g * g);
      act = 0.5f * g * (1.f + std::tanh(inner));
    }
    gu[i] = act * gu[Fw + i];
  }
  sync();
  if (t == 0) sh.rows.emplace(gu, 1, Fw);
  sync();
  product(b.w[6], gu, y);
  sync();
  if (t == 0) residual(3, x1, y, y);
}

// A whole decoding step's blocks — one token of one sequence through blocks[0], blocks[1], … — in one call and
// one parallel region (a step's matrices are microseconds of work each, less than opening a region costs).
// Per block i: cos[i], sin[i] (Dh/2 float32 each: the new token's rotation), the cache buffers keys[i],
// values[i] ((1, Hkv, capacity, Dh) float32, contiguous: posenc.attention.KVCache's room), the first visible
// key starts[i] and the new token's slot indexes[i]. x (1, 1, D) float32 → the last block's output.
torch::Tensor decode_blocks(const torch::Tensor& x, const std::vector<const Block*>& blocks,
                            const std::vector<torch::Tensor>& cos, const std::vector<torch::Tensor>& sin,
                            const std::vector<torch::Tensor>& keys, const std::vector<torch::Tensor>& values,
                            const std::vector<int64_t>& starts, const std::vector<int64_t>& indexes) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 (1, 1, D) tensor");
  const size_t L = blocks.size();
  TORCH_CHECK(L > 0 && cos.size() == L && sin.size() == L && keys.size() == L && values.size() == L &&
                  starts.size() == L && indexes.size() == L,
              "one cos, sin, keys, values, start and index per block");
  const int64_t D = x.size(-1);
  TORCH_CHECK(x.numel() == D, "one token of one sequence: x must be (1, 1, D), got ", x.sizes());
  int64_t QD = 0, KV = 0, Fw = 0, Dh = 0, T = 0;
  for (size_t i = 0; i < L; ++i) {
    const Block& b = *blocks[i];
    TORCH_CHECK(b.D == D, "block ", i, " takes D = ", b.D, ", x has ", D);
    const auto &k = keys[i], &v = values[i];
    TORCH_CHECK(k.dim() == 4 && k.sizes() == v.sizes() && k.size(0) == 1 && k.size(1) == b.Hkv && k.size(3) == b.Dh &&
                    k.is_contiguous() && v.is_contiguous() && k.scalar_type() == torch::kFloat32 &&
                    v.scalar_type() == torch::kFloat32,
                "keys, values: contiguous float32 (1, Hkv, capacity, Dh)");
    TORCH_CHECK(0 <= starts[i] && starts[i] <= indexes[i] && indexes[i] < k.size(2),
                "cache slots: 0 <= start <= index < capacity");
    TORCH_CHECK(cos[i].numel() == b.Dh / 2 && sin[i].numel() == b.Dh / 2 && cos[i].is_contiguous() &&
                    sin[i].is_contiguous() && cos[i].scalar_type() == torch::kFloat32 &&
                    sin[i].scalar_type() == torch::kFloat32,
                "cos, sin: Dh/2 contiguous float32 values each");
    QD = std::max(QD, b.QD), KV = std::max(KV, b.Hkv * b.Dh), Fw = std::max(Fw, b.Fw), Dh = std::max(Dh, b.Dh);
    T = std::max(T, indexes[i] - starts[i] + 1);
  }
  Shared sh;
  sh.h.resize(D), sh.qkv.resize(QD + 2 * KV), sh.q.resize(QD), sh.att.resize(QD), sh.x1.resize(D),
      sh.gu.resize(2 * Fw);
  auto out = torch::empty_like(x);
  std::vector<float> between(L > 1 ? D : 0);  // blocks alternate between this and out: the last writes out
  const auto body = [&](int t, int nt, const auto& sync) {
    std::vector<float> tmp(Dh), p(T);
    const float* in = x.data_ptr<float>();
    for (size_t i = 0; i < L; ++i) {
      float* o = (L - 1 - i) % 2 == 0 ? out.data_ptr<float>() : between.data();
      block_step(*blocks[i], in, o, cos[i].data_ptr<float>(), sin[i].data_ptr<float>(), keys[i].data_ptr<float>(),
                 values[i].data_ptr<float>(), keys[i].size(2), starts[i], indexes[i], sh, tmp, p, t, nt, sync);
      in = o;
    }
  };
#ifdef _OPENMP
  // the threads torch is set to use, unless already inside a parallel region (then this thread alone)
  const int threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  if (threads > 1) {
    const auto barrier = [] {
#pragma omp barrier
    };
#pragma omp parallel num_threads(threads)
    body(omp_get_thread_num(), omp_get_num_threads(), barrier);
    return out;
  }
#endif
  body(0, 1, [] {});
  return out;
}

// decode_blocks for one block given by its tensors (checked on every call; posenc.models.fused keeps Blocks).
torch::Tensor decode_block(const torch::Tensor& x, const std::vector<torch::Tensor>& norms,
                           const std::vector<double>& eps, const std::vector<torch::Tensor>& weights,
                           const std::vector<torch::Tensor>& scales, const std::vector<int64_t>& bits,
                           const std::vector<c10::optional<torch::Tensor>>& biases,
                           const std::vector<torch::Tensor>& qk_norms, double qk_eps, const torch::Tensor& cos,
                           const torch::Tensor& sin, bool half, torch::Tensor& keys, torch::Tensor& values,
                           int64_t start, int64_t index, double scale, int64_t activation) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.numel() == x.size(-1),
              "one token of one sequence: x must be (1, 1, D), got ", x.sizes());
  TORCH_CHECK(keys.dim() == 4, "keys, values: contiguous float32 (1, Hkv, capacity, Dh)");
  const Block b(norms, eps, weights, scales, bits, biases, qk_norms, qk_eps, keys.size(3), half, scale, activation);
  return decode_blocks(x, {&b}, {cos}, {sin}, {keys}, {values}, {start}, {index});
}

// The path matvec takes: 2 AVX-512 VNNI, 1 AVX2, 0 the plain loop. set_level(k) takes min(k, the widest
// compiled in) and returns the one it replaced (for tests that check each path; not thread-safe).
int64_t get_level() { return level; }
int64_t set_level(int64_t k) {
  const int before = level;
  level = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(k, BEST)));
  return before;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("matvec", &matvec, "group-quantised weight × few rows (see the file's header)", py::arg("x"),
        py::arg("weight"), py::arg("scales"), py::arg("bits"), py::arg("bias") = py::none());
  m.def("quantise", &quantise, "the 8-bit activations the kernel uses");
  m.def("dequantise", &dequantise, "rows [n0, n1) of a stored weight as float32 or bfloat16", py::arg("weight"),
        py::arg("scales"), py::arg("bits"), py::arg("n0"), py::arg("n1"), py::arg("bf16") = false);
  m.def("rms_norm", &rms_norm, "a decoding step's RMSNorm (see above)");
  m.def("rope", &rope, "a decoding step's RoPE rotation (see above)");
  py::class_<Block>(m, "Block", "a decoder block's weights, checked once, for decode_blocks (see above)")
      .def(py::init<const std::vector<torch::Tensor>&, const std::vector<double>&, const std::vector<torch::Tensor>&,
                    const std::vector<torch::Tensor>&, const std::vector<int64_t>&,
                    const std::vector<c10::optional<torch::Tensor>>&, const std::vector<torch::Tensor>&, double,
                    int64_t, bool, double, int64_t>(),
           py::arg("norms"), py::arg("eps"), py::arg("weights"), py::arg("scales"), py::arg("bits"), py::arg("biases"),
           py::arg("qk_norms"), py::arg("qk_eps"), py::arg("head_dim"), py::arg("half"), py::arg("scale"),
           py::arg("activation"));
  m.def("decode_blocks", &decode_blocks, "a decoding step's blocks in one call (see above)");
  m.def("decode_block", &decode_block, "one decoder block's decoding step in one call (see above)");
  m.def("get_level", &get_level, "the path matvec takes: 2 AVX-512 VNNI, 1 AVX2, 0 a plain loop");
  m.def("set_level", &set_level, "take a narrower path (tests); returns the previous level");
}
