// The Adam update as one hand-written loop over (param, grad, mu, nu), compiled
// at -O3 without errno on sqrt for the best level the CPU has (target_clones):
// the bound bench_jit's BM_adam_loop sets for kiln's jitted update.
#include <cmath>
#include <cstddef>

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void adam_loop(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    std::size_t n, float s1, float s2) {
  const float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f, eps = 1e-8f;
  for (std::size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] * s1) / (std::sqrt(v[i] * s2) + eps);
  }
}
