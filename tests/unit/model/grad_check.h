#pragma once
// A finite-difference check of a model's analytic gradients that is built to be able to fail:
// a zero, doubled or negated gradient of any one tensor is rejected (test_gpt.cpp proves it
// for every tensor of a 2-layer GPT).
//
// Probes. For every parameter tensor:
//   * the `top_k` elements with the largest |analytic gradient|;
//   * `directions` random unit directions v spanning the whole tensor (analytic value g . v),
//     the ones with the largest pilot difference (see below) among `direction_candidates`
//     draws. They see every element, so a gradient wrong only where it is small shows too.
//
// Numeric value of a probe: a central difference C(s) = (L(w + s v) - L(w - s v)) / |D|, where
// D = (w + s v) - (w - s v) is the displacement actually realised in f32 (w +- s v rounded to
// f32); the analytic value is g . D / |D|, so both sides describe exactly the same step and
// rounding the perturbed weights costs no accuracy. L is the mean loss that GPT::forward
// returns (per-position f32 losses summed in double, the mean rounded to f32 once), taken as
// double. The numeric value is the Richardson extrapolation (4 C(h) - C(2h)) / 3, which
// cancels the h^2 truncation term of C(h); (C(h) - C(2h)) / 3 estimates that term.
//
// Step h, per probe. Each evaluation of L carries f32 rounding noise of about one ulp of L
// (measure_loss_noise: 4.8e-7 at L ~ 4.4; 2000 perturbations of a few ulps of one weight never
// moved L by more than one ulp). The bound used is noise_safety = 2 times the measured value,
// so C(s) errs by at most 2 noise / s from rounding, and the extrapolation by 1.5 times that
// at s = h. h is picked so that the loss moves by about dloss = 3e-3 (~6000 ulps) over
// C(2h): 2h = dloss / |pilot|, where `pilot` is C(pilot_h = 1e-2) (numeric, never the
// analytic gradient, so the reference does not depend on the gradient under test), and no
// weight moves by more than max_h = 0.2. Smaller steps drown in rounding, larger ones leave
// the smooth regime: for the test model both conditions below hold with margins of ~2.
//
// A probe passes when
//   1. it can discriminate: the rounding bound is below rel_tol / 5 of |numeric| (otherwise a
//      right gradient could fail, or a wrong one pass, by noise);
//   2. the step is in the smooth regime: the h^2 term (C(h) - C(2h)) / 3 that the
//      extrapolation removes is below rel_tol / 2 of |numeric| (what remains is of order
//      h^4, far smaller);
//   3. |analytic - numeric| <= rel_tol |numeric|, rel_tol = 1%.
// A zero, doubled or negated analytic value has a relative error of 1, 1 or 2: 100 times
// rel_tol. (At 1% the check also catches subtle kernel bugs: dropping the factor 3 of the
// cubic term in GELU's derivative gives errors of 1-5%.)

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tide/core/rng.h"
#include "tide/model/gpt.h"

namespace tide::test {

// FNV-1a of a string: random streams keyed by tensor name, not by layout position.
inline uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct GradCheckOptions {
  int top_k = 3;                 // element probes per tensor (largest |analytic|)
  int directions = 2;            // random-direction probes per tensor ...
  int direction_candidates = 8;  // ... the best of this many draws
  double rel_tol = 0.01;         // |analytic - numeric| <= rel_tol |numeric|
  double dloss = 3e-3;           // |L(w + 2h v) - L(w - 2h v)| / 2 aimed at; picks h
  double pilot_h = 1e-2;         // step of the pilot difference that picks h
  double max_h = 0.2;            // no weight moves by more than this (weights are O(0.1..1))
  double noise_safety = 2.0;     // the noise bound is this times the measured noise
  uint64_t seed = 2024;          // random directions, noise measurement
};

struct GradProbe {
  int tensor = 0;
  std::string name;
  int64_t element = -1;  // the element probed, or -1 for a random direction
  int direction = -1;    // which random direction, or -1
  double h = 0;          // the smaller of the two steps
  double analytic = 0;
  double numeric = 0;     // Richardson extrapolation of the central differences at h and 2h
  double central_h = 0;   // central difference at step h
  double central_2h = 0;  // central difference at step 2h
  double noise = 0;       // bound on |numeric error| from the f32 rounding of L
  std::string failure;    // empty when the probe passes

  // The h^2 truncation term of central_h, which the extrapolation removes.
  double truncation() const { return std::abs(central_h - central_2h) / 3; }
  double rel_error() const {
    return numeric != 0 ? std::abs(analytic - numeric) / std::abs(numeric) : INFINITY;
  }
  std::string where() const {
    return element >= 0 ? fmt::format("{}[{}]", name, element)
                        : fmt::format("{} along random direction {}", name, direction);
  }
  std::string str() const {
    return fmt::format(
        "{}: analytic {:+.6e}, numeric {:+.6e} (relative error {:.2e}; central "
        "differences {:+.6e} at step {:.2e}, {:+.6e} at twice that; rounding "
        "bound {:.1e})",
        where(), analytic, numeric, rel_error(), central_h, h, central_2h, noise);
  }
};

class GradChecker {
 public:
  // `loss` evaluates the model's loss at the current parameters (a forward pass). It must be a
  // pure function of the parameters: dropout masks fixed by (seed, step), no state carried.
  GradChecker(GPT& gpt, std::function<double()> loss, GradCheckOptions opt = {})
      : gpt_(gpt), loss_(std::move(loss)), opt_(opt) {
    loss0_ = loss_();
    deterministic_ = loss_() == loss0_;
    noise_ = measure_loss_noise();
  }

  double loss0() const { return loss0_; }
  // Two evaluations at the same parameters gave the same loss.
  bool deterministic() const { return deterministic_; }
  // The largest |L(w') - L(w)| seen for w' = w moved by 1-4 ulps in one element (64 tries),
  // whose true effect on L (|g| x 4 ulps of w, at most ~1e-7) is below L's ulp: the rounding
  // noise of one evaluation, counted high. At least one ulp of L.
  double measured_noise() const { return noise_; }
  const GradCheckOptions& options() const { return opt_; }

  // Probes tensor `id` (an index into layout().slots()) against the gradient now in its GRAD
  // tensor. Leaves the parameters as they were, bit for bit.
  std::vector<GradProbe> check_tensor(int id) {
    const TensorSlot& slot = gpt_.store().layout().slots()[id];
    const Tensor gt = gpt_.store().tensor(ChunkKind::GRAD, id);
    const std::vector<double> g(gt.f32(), gt.f32() + gt.numel());
    std::vector<GradProbe> probes;
    // Element probes: the largest |g| first, ties by index.
    std::vector<int64_t> order(g.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    const size_t k = std::min<size_t>(opt_.top_k, order.size());
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return std::abs(g[a]) != std::abs(g[b]) ? std::abs(g[a]) > std::abs(g[b]) : a < b;
    });
    for (size_t j = 0; j < k; ++j) {
      std::vector<double> v(g.size(), 0.0);
      v[order[j]] = 1.0;
      GradProbe p = probe(id, slot.name, g, v);
      p.element = order[j];
      probes.push_back(std::move(p));
    }
    // Random unit directions: of `direction_candidates` draws, those along which the pilot
    // difference (numeric, never the analytic gradient) is largest.
    std::vector<std::pair<double, std::vector<double>>> candidates;
    for (int d = 0; d < opt_.direction_candidates; ++d) {
      const PhiloxStream rng{opt_.seed, name_hash(slot.name) + d};
      std::vector<double> v(g.size());
      double norm = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = rng.normal(i);
        norm += v[i] * v[i];
      }
      for (double& x : v) x /= std::sqrt(norm);
      const double pilot = std::abs(central(id, g, v, opt_.pilot_h, nullptr));
      candidates.emplace_back(pilot, std::move(v));
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int d = 0; d < std::min<int>(opt_.directions, candidates.size()); ++d) {
      GradProbe p = probe(id, slot.name, g, candidates[d].second);
      p.direction = d;
      probes.push_back(std::move(p));
    }
    for (GradProbe& p : probes) judge(p);
    return probes;
  }

  std::vector<GradProbe> check_all() {
    std::vector<GradProbe> all;
    for (size_t id = 0; id < gpt_.store().layout().slots().size(); ++id) {
      auto p = check_tensor(static_cast<int>(id));
      all.insert(all.end(), p.begin(), p.end());
    }
    return all;
  }

 private:
  // Central difference of L along the unit vector v with step h; sets *analytic to g . D / |D|
  // for the displacement D realised in f32.
  double central(int id, const std::vector<double>& g, const std::vector<double>& v, double h,
                 double* analytic) {
    const Tensor wt = gpt_.store().tensor(ChunkKind::PARAM, id);
    float* w = wt.f32();
    const std::vector<float> w0(w, w + wt.numel());
    std::vector<float> plus(w0.size()), minus(w0.size());
    double gd = 0, dd = 0;
    for (size_t i = 0; i < w0.size(); ++i) {
      plus[i] = static_cast<float>(w0[i] + h * v[i]);
      minus[i] = static_cast<float>(w0[i] - h * v[i]);
      const double d = double(plus[i]) - double(minus[i]);
      gd += g[i] * d;
      dd += d * d;
    }
    std::memcpy(w, plus.data(), plus.size() * 4);
    const double lp = loss_();
    std::memcpy(w, minus.data(), minus.size() * 4);
    const double lm = loss_();
    std::memcpy(w, w0.data(), w0.size() * 4);
    const double norm = std::sqrt(dd);
    if (analytic) *analytic = gd / norm;
    return (lp - lm) / norm;
  }

  GradProbe probe(int id, const std::string& name, const std::vector<double>& g,
                  const std::vector<double>& v) {
    GradProbe p;
    p.tensor = id;
    p.name = name;
    const double pilot = std::abs(central(id, g, v, opt_.pilot_h, nullptr));
    double vmax = 0;
    for (double x : v) vmax = std::max(vmax, std::abs(x));
    const double max_h = opt_.max_h / vmax;  // no weight moves by more than opt_.max_h
    p.h = (pilot > 0 ? std::min(opt_.dloss / pilot, max_h) : max_h) / 2;
    p.central_2h = central(id, g, v, 2 * p.h, nullptr);
    p.central_h = central(id, g, v, p.h, &p.analytic);
    p.numeric = (4 * p.central_h - p.central_2h) / 3;
    // Each evaluation errs by at most noise_safety x noise, so a central difference at step s
    // (|D| = 2s) by noise_safety x noise / s: 4/3 of that at h plus 1/3 of that at 2h.
    p.noise = 1.5 * opt_.noise_safety * noise_ / p.h;
    return p;
  }

  void judge(GradProbe& p) const {
    const double tol = opt_.rel_tol;
    const double mag = std::abs(p.numeric);
    if (p.noise > tol / 5 * mag)
      p.failure = fmt::format("cannot discriminate: rounding bound {:.1e} > {} x |numeric|",
                              p.noise, tol / 5);
    else if (p.truncation() > tol / 2 * mag)
      p.failure = fmt::format("step too wide: truncation term {:.1e} > {} x |numeric|",
                              p.truncation(), tol / 2);
    else if (std::abs(p.analytic - p.numeric) > tol * mag)
      p.failure = fmt::format("relative error {:.3f} > {}", p.rel_error(), tol);
  }

  double measure_loss_noise() {
    const auto& slots = gpt_.store().layout().slots();
    const PhiloxStream rng{opt_.seed, 1u << 20};
    const double ulp = double(std::nextafter(float(loss0_), INFINITY)) - loss0_;
    double worst = ulp;
    for (int i = 0; i < 64; ++i) {
      const int id = static_cast<int>(rng.uint(2 * i) % slots.size());
      float* w = gpt_.store().tensor(ChunkKind::PARAM, id).f32();
      const int64_t e = rng.uint(2 * i + 1) % slots[id].numel;
      const float orig = w[e];
      float x = orig;
      for (int u = 0; u < 1 + i % 4; ++u) x = std::nextafter(x, i % 8 < 4 ? INFINITY : -INFINITY);
      w[e] = x;
      worst = std::max(worst, std::abs(loss_() - loss0_));
      w[e] = orig;
    }
    return worst;
  }

  GPT& gpt_;
  std::function<double()> loss_;
  GradCheckOptions opt_;
  double loss0_ = 0, noise_ = 0;
  bool deterministic_ = false;
};

}  // namespace tide::test
