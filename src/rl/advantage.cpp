// The advantage estimators of rl/advantage.hpp.
#include "rl/advantage.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace shardrl {
namespace {

void check_groups(const std::vector<double>& rewards, int group_size) {
  SHARDRL_CHECK(group_size >= 1, "group_size " + std::to_string(group_size));
  SHARDRL_CHECK(rewards.size() % static_cast<std::size_t>(group_size) == 0,
                std::to_string(rewards.size()) + " rewards do not split into groups of " + std::to_string(group_size));
}

// Calls f(first, mean) for each group whose rewards are not all equal. Equality first: sum / G
// need not round back to the common value (3 * 0.1 / 3 != 0.1), and such a group (G == 1
// included) must give exactly 0, not roundoff over a tiny spread.
template <class F>
void for_each_informative_group(const std::vector<double>& rewards, int group_size, F&& f) {
  const std::size_t G = static_cast<std::size_t>(group_size);
  for (std::size_t begin = 0; begin < rewards.size(); begin += G) {
    const auto first = rewards.begin() + static_cast<long>(begin);
    const auto [lo, hi] = std::minmax_element(first, first + group_size);
    if (*lo == *hi) continue;
    double mean = 0;
    for (std::size_t i = 0; i < G; ++i) mean += rewards[begin + i];
    f(begin, mean / static_cast<double>(G));
  }
}

}  // namespace

std::vector<float> group_advantages(const std::vector<double>& rewards, int group_size, bool scale_by_std,
                                    double eps) {
  check_groups(rewards, group_size);
  std::vector<float> advantages(rewards.size(), 0.0f);
  const std::size_t G = static_cast<std::size_t>(group_size);
  for_each_informative_group(rewards, group_size, [&](std::size_t begin, double mean) {
    double scale = 1.0;
    if (scale_by_std) {
      double ss = 0;
      for (std::size_t i = 0; i < G; ++i) ss += (rewards[begin + i] - mean) * (rewards[begin + i] - mean);
      scale = 1.0 / (std::sqrt(ss / static_cast<double>(G - 1)) + eps);
    }
    for (std::size_t i = 0; i < G; ++i) advantages[begin + i] = static_cast<float>((rewards[begin + i] - mean) * scale);
  });
  return advantages;
}

std::vector<float> rloo_advantages(const std::vector<double>& rewards, int group_size) {
  check_groups(rewards, group_size);
  std::vector<float> advantages(rewards.size(), 0.0f);
  const std::size_t G = static_cast<std::size_t>(group_size);
  for_each_informative_group(rewards, group_size, [&](std::size_t begin, double mean) {
    const double sum = mean * static_cast<double>(G);
    for (std::size_t i = 0; i < G; ++i)
      advantages[begin + i] = static_cast<float>(rewards[begin + i] - (sum - rewards[begin + i]) / double(G - 1));
  });
  return advantages;
}

double reward_with_kl(double reward, const std::vector<double>& kl, double kl_coef) {
  double total = 0;
  for (double k : kl) total += k;
  return reward - kl_coef * total;
}

std::vector<double> token_returns(double reward, const std::vector<double>& kl, double kl_coef) {
  std::vector<double> g(kl.size());
  double tail = 0;   // sum_{s >= t} kl_s
  for (std::size_t t = kl.size(); t-- > 0;) {
    tail += kl[t];
    g[t] = reward - kl_coef * tail;
  }
  return g;
}

double TokenMoments::variance() const {
  if (count < 2) return 0.0;
  const double m = mean();
  return std::max(0.0, (sum_sq - count * m * m) / (count - 1));
}

double whiten(double x, const TokenMoments& m) { return (x - m.mean()) / std::sqrt(m.variance() + 1e-8); }

}  // namespace shardrl
