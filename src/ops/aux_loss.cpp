#include "ops/aux_loss.h"

#include "core/device.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include <vector>

#include "ops/scalar_math.h"

namespace parity {

namespace {

// counts (E): counts[e] = number of (token, slot) entries of chosen (S, K) equal to e
// (top-K picks distinct experts, so this is the number of tokens that chose e).
std::vector<int64_t> expert_counts(const int64_t* chosen, int64_t S, int64_t E, int64_t K) {
  std::vector<int64_t> counts(static_cast<size_t>(E), 0);
  for (int64_t a = 0; a < S * K; ++a) {
    ops_detail::check_index(chosen[a], E, "aux_loss: chosen");
    ++counts[chosen[a]];
  }
  return counts;
}

// f (E): f[e] = (E / (K * S)) * counts[e], the coefficient computed once as T(E) / (T(K) * T(S)).
template <class T>
std::vector<T> expert_fractions(const int64_t* chosen, int64_t S, int64_t E, int64_t K) {
  const std::vector<int64_t> counts = expert_counts(chosen, S, E, K);
  const T coef = T(E) / (T(K) * T(S));
  std::vector<T> f(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) f[e] = coef * T(counts[e]);
  return f;
}

}  // namespace

// Returns sum_e f[e] * p[e] (e order) with p[e] = (sum_t s[t][e] / Z_t) / S (t order),
// Z_t = sum_e s[t][e] (e order). s (S, E), chosen (S, K). S = 0 or K = 0 gives 0.
template <class T>
T aux_loss_forward(const T* s, const int64_t* chosen, int64_t S, int64_t E, int64_t K) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::aux_loss_forward(s, chosen, S, E, K);
#endif
  if (S == 0 || K == 0) return T(0);
  const std::vector<T> f = expert_fractions<T>(chosen, S, E, K);  // (E)
  std::vector<T> psum(static_cast<size_t>(E), T(0));               // (E)
  for (int64_t t = 0; t < S; ++t) {
    const T* sr = s + t * E;  // (E)
    T Z = T(0);
    for (int64_t e = 0; e < E; ++e) Z += sr[e];
    for (int64_t e = 0; e < E; ++e) psum[e] += sr[e] / Z;
  }
  T loss = T(0);
  for (int64_t e = 0; e < E; ++e) loss += f[e] * (psum[e] / T(S));
  return loss;
}

// d(loss)/ds[t][j] = (f[j] - sum_e f[e] * shat[t][e]) / (Z_t * S), shat = s / Z_t:
// ds[t][j] += dloss * that.  f carries no gradient (it is a count).
template <class T>
void aux_loss_backward(const T* s, const int64_t* chosen, int64_t S, int64_t E, int64_t K, T dloss, T* ds) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::aux_loss_backward(s, chosen, S, E, K, dloss, ds);
#endif
  if (S == 0 || K == 0) return;
  const std::vector<T> f = expert_fractions<T>(chosen, S, E, K);  // (E)
  for (int64_t t = 0; t < S; ++t) {
    const T* sr = s + t * E;  // (E)
    T* dsr = ds + t * E;      // (E)
    T Z = T(0);
    for (int64_t e = 0; e < E; ++e) Z += sr[e];
    T fs = T(0);  // sum_e f[e] * shat[e]
    for (int64_t e = 0; e < E; ++e) fs += f[e] * (sr[e] / Z);
    const T denom = Z * T(S);
    for (int64_t j = 0; j < E; ++j) dsr[j] += dloss * ((f[j] - fs) / denom);
  }
}

template float aux_loss_forward<float>(const float*, const int64_t*, int64_t, int64_t, int64_t);
template double aux_loss_forward<double>(const double*, const int64_t*, int64_t, int64_t, int64_t);
template void aux_loss_backward<float>(const float*, const int64_t*, int64_t, int64_t, int64_t, float, float*);
template void aux_loss_backward<double>(const double*, const int64_t*, int64_t, int64_t, int64_t, double,
                                        double*);

}  // namespace parity
