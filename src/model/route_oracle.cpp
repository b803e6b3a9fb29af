#include "model/route_oracle.h"

#include <cmath>

namespace parity {

int64_t follow_baseline_routes(const RouteFollow& follow, const int64_t* ids, int64_t n, int64_t K, int64_t E,
                               int64_t* chosen) {
  const RouteOracle* o = follow.oracle;
  if (o == nullptr || o->chosen == nullptr || o->scores == nullptr) return 0;
  const auto l = static_cast<size_t>(follow.layer);
  if (l >= o->chosen->size() || l >= o->scores->size()) return 0;
  const std::vector<int64_t>& base = (*o->chosen)[l];
  const std::vector<double>& val = (*o->scores)[l];
  const int64_t total = K > 0 ? static_cast<int64_t>(base.size()) / K : 0;
  int64_t changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t tok = ids != nullptr ? ids[i] : follow.first + i;
    if (tok < 0 || tok >= total) continue;
    int64_t* mine = chosen + i * K;
    const int64_t* ref = base.data() + tok * K;
    int64_t k = 0;
    while (k < K && mine[k] == ref[k]) ++k;
    if (k == K) continue;  // the same choice
    bool tie = o->always;
    if (!tie && mine[k] >= 0 && mine[k] < E && ref[k] >= 0 && ref[k] < E) {
      const double vb = val[static_cast<size_t>(tok * E + ref[k])], vm = val[static_cast<size_t>(tok * E + mine[k])];
      const double gap = std::abs(vb - vm);
      tie = gap <= o->tie_rel * (std::abs(vb) + std::abs(vm)) || gap <= o->tie_abs;
    }
    if (!tie) continue;  // beyond the noise: kept, and the verdict names it
    for (int64_t j = 0; j < K; ++j) mine[j] = ref[j];
    ++changed;
  }
  return changed;
}

}  // namespace parity
