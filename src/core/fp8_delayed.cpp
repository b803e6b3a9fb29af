// Delayed scaling (fp8_delayed.h).
#include "core/fp8_delayed.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/error.h"

namespace parity {

namespace {
thread_local Fp8Delayed* tl_state = nullptr;
thread_local Fp8SiteScope::Site* tl_site = nullptr;
}  // namespace

Fp8Delayed::Fp8Delayed(const std::vector<Fp8Module>& modules, int64_t history_len, bool most_recent)
    : history_len_(history_len), most_recent_(most_recent) {
  if (history_len < 1) throw Error("fp8 delayed scaling: an amax history of " + std::to_string(history_len));
  for (const Fp8Module& m : modules) {
    sites_[m.prefix] = {slots_, m.blocks};
    if (m.weights.size() > 4) throw Error("fp8 delayed scaling: " + m.prefix + " has more than 4 weights");
    for (size_t i = 0; i < m.weights.size(); ++i) weights_[m.weights[i]] = {m.prefix, static_cast<int64_t>(i)};
    slots_ += kFp8SiteSlots * m.blocks;
  }
  history = Tensor<double>(Shape{history_len_, slots_});
  scales = Tensor<double>(Shape{slots_}, std::vector<double>(static_cast<size_t>(slots_), 1.0));
  amax_.assign(static_cast<size_t>(slots_), 0.0f);
}

int64_t Fp8Delayed::site(std::string_view prefix, int64_t block) const {
  const auto it = sites_.find(prefix);
  if (it == sites_.end() || block < 0 || block >= it->second.second)
    throw Error("fp8 delayed scaling: no module " + std::string(prefix) + " block " + std::to_string(block));
  return it->second.first + block * kFp8SiteSlots;
}

int64_t Fp8Delayed::weight_slot(std::string_view name, int64_t block) const {
  const auto it = weights_.find(name);
  if (it == weights_.end()) throw Error("fp8 delayed scaling: " + std::string(name) + " is not an fp8 weight");
  return site(it->second.first, block) + kFp8WeightSlot0 + it->second.second;
}

bool Fp8Delayed::fresh(int64_t slot) const { return scales.data.at(static_cast<size_t>(slot)) == 1.0; }

void Fp8Delayed::record(int64_t slot, float amax) {
  float& a = amax_.at(static_cast<size_t>(slot));
  if (amax > a) a = amax;  // NaN: not taken (as the current recipe's amax)
  recorded_ = true;
}

void Fp8Delayed::end_step(const AmaxReduce* reduce) {
  if (!on()) return;
  if (reduce != nullptr && *reduce) (*reduce)(std::span<float>(amax_));
  const auto S = static_cast<size_t>(slots_);
  auto& h = history.data;
  std::copy_backward(h.begin(), h.end() - static_cast<std::ptrdiff_t>(S), h.end());  // row i -> i + 1
  for (size_t s = 0; s < S; ++s) h[s] = amax_[s];
  std::vector<float> a(S, 0.0f);
  float top[2] = {0.0f, 0.0f};  // the largest finite amax_h of each format (E4M3, E5M2)
  for (size_t s = 0; s < S; ++s) {
    a[s] = static_cast<float>(h[s]);
    for (int64_t r = 1; r < history_len_ && !most_recent_; ++r)
      a[s] = std::max(a[s], static_cast<float>(h[static_cast<size_t>(r) * S + s]));
    float& t = top[format(static_cast<int64_t>(s)) == Fp8::e5m2 ? 1 : 0];
    if (std::isfinite(a[s])) t = std::max(t, a[s]);
  }
  for (size_t s = 0; s < S; ++s) {
    const Fp8 f = format(static_cast<int64_t>(s));
    if (a[s] > kFp8AmaxRounding * top[f == Fp8::e5m2 ? 1 : 0] && a[s] > 0 && std::isfinite(a[s]))
      scales.data[s] = fp8_scale(f, a[s]);
  }
  std::fill(amax_.begin(), amax_.end(), 0.0f);
  recorded_ = false;
}

void Fp8Delayed::check(const std::string& where) const {
  if (history.shape != Shape{history_len_, slots_} || scales.shape != Shape{slots_})
    throw ConfigError(where, "fp8.amax_history / fp8.scale: shapes (" + std::to_string(history_len_) + ", " +
                                 std::to_string(slots_) + ") and (" + std::to_string(slots_) + ") expected");
  for (double a : history.data)
    if (!(a >= 0) || !std::isfinite(a)) throw ConfigError(where, "fp8.amax_history: amaxes must be finite, >= 0");
  for (double s : scales.data)
    if (!(s > 0) || !std::isfinite(s)) throw ConfigError(where, "fp8.scale: scales must be finite and positive");
}

Fp8StateScope::Fp8StateScope(Fp8Delayed* s) : saved_(tl_state) { tl_state = s; }
Fp8StateScope::~Fp8StateScope() { tl_state = saved_; }
Fp8Delayed* fp8_delayed() { return tl_state; }

Fp8SiteScope::Fp8SiteScope(int64_t layer, std::string_view module) : saved_(tl_site) {
  if (tl_state == nullptr || !tl_state->on()) return;
  site_.prefix = "layers." + std::to_string(layer) + "." + std::string(module);
  site_.base = tl_state->site(site_.prefix, 0);
  tl_site = &site_, set_ = true;
}

Fp8SiteScope::Fp8SiteScope(int64_t block) : saved_(tl_site) {
  if (tl_state == nullptr || !tl_state->on()) return;
  if (tl_site == nullptr) throw std::logic_error("fp8 delayed scaling: an expert's site outside its module's");
  site_.prefix = tl_site->prefix;
  site_.base = tl_state->site(site_.prefix, block);
  tl_site = &site_, set_ = true;
}

Fp8SiteScope::~Fp8SiteScope() {
  if (set_) tl_site = saved_;
}

int64_t fp8_next_slot(Fp8 f) {
  if (tl_site == nullptr) throw std::logic_error("fp8 delayed scaling: a quantization outside every site");
  int64_t& n = f == Fp8::e4m3 ? tl_site->e4 : tl_site->e5;
  if (n >= 4) throw std::logic_error("fp8 delayed scaling: more than 4 quantizations at " + tl_site->prefix);
  return tl_site->base + (f == Fp8::e4m3 ? 0 : kFp8GradSlot0) + n++;
}

}  // namespace parity
