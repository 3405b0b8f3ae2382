// The lean decode step's per-layer operations between its matrix products, one call each
// (specsparse/decoding/lean_kernels.py builds this file and binds it; lean_step.py calls it).
//
// Every output row depends on its own input row only (and, for attention, on the keys it sees), computed
// in the same order at any row count: given the same inputs, a token of an n-token verification gets the
// bits a one-token forward gives it, in float32 and in bfloat16 alike. Arithmetic is float32; bfloat16
// values are rounded where HF's bfloat16 modules round them (to nearest even).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

typedef uint16_t bf16;

inline float load(const float* p, long i) { return p[i]; }
inline float load(const bf16* p, long i) {
  uint32_t bits = (uint32_t)p[i] << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
inline void store(float* p, long i, float v) { p[i] = v; }
inline void store(bf16* p, long i, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    p[i] = (bf16)((bits >> 16) | 0x40);  // NaN stays NaN
    return;
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  p[i] = (bf16)(bits >> 16);
}
template <typename T> inline float rounded(float v) {  // v as type T holds it
  T t;
  store(&t, 0, v);
  return load(&t, 0);
}

constexpr int MAX_HEAD_DIM = 512;
constexpr int MAX_GROUP = 64;  // query heads per kv head

// e^x for x <= 0 (a score minus its row's maximum), to a few units in the last place; written so that
// loops over it vectorize (libm's expf does not without -ffast-math). Below -87, 0.
inline float exp_nonpositive(float x) {
  const float clamped = x < -87.f ? -87.f : x;
  const float k = std::nearbyint(clamped * 1.44269504f);  // x = k ln2 + r, |r| <= ln2 / 2
  const float r = (clamped - k * 0.693145752f) - k * 1.42860677e-6f;
  float p = 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t bits = ((int32_t)k + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x < -87.f ? 0.f : p * scale;
}

// hidden [n, dim] += delta (when given); out = RMSNorm(hidden) * weight, normalised in float32 and
// scaled in T (HF's Llama RMSNorm).
template <typename T>
void add_rms_norm(T* hidden, const T* delta, const T* weight, float eps, T* out, int n, int dim) {
  for (int r = 0; r < n; ++r) {
    T* row = hidden + (long)r * dim;
    if (delta)
      for (int i = 0; i < dim; ++i) store(row, i, load(row, i) + load(delta + (long)r * dim, i));
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < dim; ++i) sum += load(row, i) * load(row, i);
    float scale = 1.f / std::sqrt(sum / dim + eps);
    for (int i = 0; i < dim; ++i) store(out + (long)r * dim, i, load(weight, i) * rounded<T>(load(row, i) * scale));
  }
}

// One head's q or k: RMSNorm over the head first where `norm` is given (Qwen3), then the rotary
// embedding as HF's rotate_half applies it (cos, sin: float32 [head_dim] at the token's position).
template <typename T>
void rotate(const T* x, const T* norm, float eps, const float* cos, const float* sin, int head_dim, float* out) {
  float in[MAX_HEAD_DIM];
  float scale = 1.f;
  if (norm) {
    float sum = 0.f;
    for (int i = 0; i < head_dim; ++i) sum += load(x, i) * load(x, i);
    scale = 1.f / std::sqrt(sum / head_dim + eps);
  }
  for (int i = 0; i < head_dim; ++i) in[i] = norm ? rounded<T>(load(norm, i) * rounded<T>(load(x, i) * scale)) : load(x, i);
  int half = head_dim / 2;
  for (int i = 0; i < half; ++i) out[i] = rounded<T>(in[i] * cos[i] - in[i + half] * sin[i]);
  for (int i = half; i < head_dim; ++i) out[i] = rounded<T>(in[i] * cos[i] + in[i - half] * sin[i]);
}

// Attention of n tokens. qkv [n, (heads + 2 kv_heads) head_dim] (a fused q/k/v product); each token's
// rotated key and its value are written into the cache buffers [kv_heads, capacity, head_dim] at
// position start + t, then token t attends over the keys j < limit[t] that mask [n, mask_stride] (when
// given) marks visible. out [n, heads head_dim].
template <typename T>
void attention(const T* qkv, int n, int heads, int kv_heads, int head_dim, const float* cos, const float* sin,
               const T* q_norm, const T* k_norm, float eps, T* keys, T* values, long capacity, long start,
               const int32_t* limit, const uint8_t* mask, long mask_stride, float scaling, T* out) {
  const long row = (long)(heads + 2 * kv_heads) * head_dim;
  float rotated[MAX_HEAD_DIM];
  for (int t = 0; t < n; ++t) {
    const T* x = qkv + t * row;
    for (int h = 0; h < kv_heads; ++h) {
      rotate(x + (long)(heads + h) * head_dim, k_norm, eps, cos + (long)t * head_dim, sin + (long)t * head_dim, head_dim,
             rotated);
      T* key = keys + ((long)h * capacity + start + t) * head_dim;
      T* value = values + ((long)h * capacity + start + t) * head_dim;
      const T* new_value = x + (long)(heads + kv_heads + h) * head_dim;
      for (int i = 0; i < head_dim; ++i) {
        store(key, i, rotated[i]);
        value[i] = new_value[i];
      }
    }
  }
  // One work item per (token, kv head): its query heads' rows, over the keys the token sees. Items
  // run in parallel where OpenMP is on; each row's arithmetic runs in the same order at any row count.
  const int group = heads / kv_heads;
#pragma omp parallel for schedule(static) if (n * kv_heads > 1)
  for (int item = 0; item < n * kv_heads; ++item) {
    const int t = item / kv_heads, g = item % kv_heads;
    const long visible = limit[t];
    const uint8_t* sees = mask ? mask + t * mask_stride : nullptr;
    const T* head_keys = keys + (long)g * capacity * head_dim;
    const T* head_values = values + (long)g * capacity * head_dim;
    std::vector<float> queries((size_t)group * head_dim), scores((size_t)group * visible), sums((size_t)group * head_dim);
    float tops[MAX_GROUP], totals[MAX_GROUP], key[MAX_HEAD_DIM];
    for (int m = 0; m < group; ++m) {
      rotate(qkv + t * row + (long)(g * group + m) * head_dim, q_norm, eps, cos + (long)t * head_dim,
             sin + (long)t * head_dim, head_dim, &queries[(size_t)m * head_dim]);
      tops[m] = -INFINITY;
    }
    for (long j = 0; j < visible; ++j) {
      if (sees && !sees[j]) continue;
      for (int i = 0; i < head_dim; ++i) key[i] = load(head_keys + j * head_dim, i);
      for (int m = 0; m < group; ++m) {
        const float* query = &queries[(size_t)m * head_dim];
        float dot = 0.f;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < head_dim; ++i) dot += query[i] * key[i];
        const float score = scores[(size_t)m * visible + j] = dot * scaling;
        tops[m] = score > tops[m] ? score : tops[m];
      }
    }
    for (int m = 0; m < group; ++m) {  // softmax weights in place of the scores
      float* weights = &scores[(size_t)m * visible];
      float total = 0.f;
#pragma omp simd reduction(+ : total)
      for (long j = 0; j < visible; ++j) {
        weights[j] = (sees && !sees[j]) ? 0.f : exp_nonpositive(weights[j] - tops[m]);
        total += weights[j];
      }
      totals[m] = total;
    }
    for (long j = 0; j < visible; ++j) {
      if (sees && !sees[j]) continue;
      for (int i = 0; i < head_dim; ++i) key[i] = load(head_values + j * head_dim, i);  // the value, in float
      for (int m = 0; m < group; ++m) {
        const float weight = scores[(size_t)m * visible + j];
        float* sum = &sums[(size_t)m * head_dim];
#pragma omp simd
        for (int i = 0; i < head_dim; ++i) sum[i] += weight * key[i];
      }
    }
    for (int m = 0; m < group; ++m) {
      T* head_out = out + ((long)t * heads + g * group + m) * head_dim;
      for (int i = 0; i < head_dim; ++i) store(head_out, i, sums[(size_t)m * head_dim + i] / totals[m]);
    }
  }
}

// out [n, inter] = SiLU(gate) * up, from a fused gate/up product [n, 2 inter].
template <typename T>
void silu_mul(const T* gate_up, int n, int inter, T* out) {
  for (int r = 0; r < n; ++r) {
    const T* row = gate_up + (long)r * 2 * inter;
    for (int i = 0; i < inter; ++i) {
      const float gate = load(row, i);
      store(out + (long)r * inter, i, rounded<T>(gate / (1.f + std::exp(-gate))) * load(row, inter + i));
    }
  }
}

}  // namespace

#define LEAN_KERNELS(T, SUFFIX)                                                                                      \
  void add_rms_norm_##SUFFIX(T* hidden, const T* delta, const T* weight, float eps, T* out, int n, int dim) {        \
    add_rms_norm(hidden, delta, weight, eps, out, n, dim);                                                           \
  }                                                                                                                  \
  void attention_##SUFFIX(const T* qkv, int n, int heads, int kv_heads, int head_dim, const float* cos,              \
                          const float* sin, const T* q_norm, const T* k_norm, float eps, T* keys, T* values,         \
                          long capacity, long start, const int32_t* limit, const uint8_t* mask, long mask_stride,    \
                          float scaling, T* out) {                                                                   \
    attention(qkv, n, heads, kv_heads, head_dim, cos, sin, q_norm, k_norm, eps, keys, values, capacity, start,       \
              limit, mask, mask_stride, scaling, out);                                                               \
  }                                                                                                                  \
  void silu_mul_##SUFFIX(const T* gate_up, int n, int inter, T* out) { silu_mul(gate_up, n, inter, out); }

extern "C" {
int max_head_dim() { return MAX_HEAD_DIM; }
int max_group() { return MAX_GROUP; }
LEAN_KERNELS(float, float32)
LEAN_KERNELS(bf16, bfloat16)
}
