// Sampled groups: the informative test, the byte form (fixed-width fields in host order: the
// ranks of one job share an architecture), and dynamic sampling's selection.
#include "rl/sampled_group.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace shardrl {
namespace {

class Writer {
 public:
  template <class T>
  void value(const T& v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <class T>
  void values(const std::vector<T>& v) {
    value(static_cast<std::uint64_t>(v.size()));
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  template <class T>
  T value() {
    T v;
    take(&v, sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> values() {
    std::vector<T> v(value<std::uint64_t>());
    take(v.data(), v.size() * sizeof(T));
    return v;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  void take(void* dst, std::size_t n) {
    SHARDRL_CHECK(at_ + n <= bytes_.size(), "a sampled-group message ends early");
    if (n > 0) std::memcpy(dst, bytes_.data() + at_, n);
    at_ += n;
  }
  const std::string& bytes_;
  std::size_t at_ = 0;
};

}  // namespace

bool SampledGroup::informative() const {
  return !scores.empty() && *std::min_element(scores.begin(), scores.end()) !=
                                *std::max_element(scores.begin(), scores.end());
}

std::string serialize_groups(const std::vector<std::pair<std::int64_t, SampledGroup>>& groups) {
  Writer w;
  w.value(static_cast<std::uint64_t>(groups.size()));
  for (const auto& [slot, g] : groups) {
    w.value(slot);
    w.value(g.prompt_index);
    w.values(g.prompt);
    w.values(g.rewards);
    w.values(g.scores);
    w.value(static_cast<std::uint64_t>(g.completions.size()));
    for (const Completion& c : g.completions) {
      w.values(c.tokens);
      w.values(c.logp);
      w.value(static_cast<std::uint8_t>(c.finished ? 1 : 0));
    }
  }
  return w.take();
}

std::vector<std::pair<std::int64_t, SampledGroup>> deserialize_groups(const std::string& bytes) {
  std::vector<std::pair<std::int64_t, SampledGroup>> groups;
  if (bytes.empty()) return groups;
  Reader r(bytes);
  const auto n = r.value<std::uint64_t>();
  for (std::uint64_t i = 0; i < n; ++i) {
    std::pair<std::int64_t, SampledGroup> p;
    p.first = r.value<std::int64_t>();
    SampledGroup& g = p.second;
    g.prompt_index = r.value<std::int64_t>();
    g.prompt = r.values<std::int32_t>();
    g.rewards = r.values<double>();
    g.scores = r.values<double>();
    g.completions.resize(r.value<std::uint64_t>());
    for (Completion& c : g.completions) {
      c.tokens = r.values<std::int32_t>();
      c.logp = r.values<float>();
      c.finished = r.value<std::uint8_t>() != 0;
    }
    groups.push_back(std::move(p));
  }
  SHARDRL_CHECK(r.done(), "a sampled-group message has bytes past its last group");
  return groups;
}

std::vector<std::int64_t> select_groups(const std::vector<char>& informative, std::int64_t needed) {
  SHARDRL_CHECK(static_cast<std::int64_t>(informative.size()) >= needed, "fewer groups drawn than the batch needs");
  std::vector<std::int64_t> chosen;
  for (std::size_t i = 0; i < informative.size() && static_cast<std::int64_t>(chosen.size()) < needed; ++i)
    if (informative[i]) chosen.push_back(static_cast<std::int64_t>(i));
  for (std::size_t i = 0; i < informative.size() && static_cast<std::int64_t>(chosen.size()) < needed; ++i)
    if (!informative[i]) chosen.push_back(static_cast<std::int64_t>(i));
  // The batch keeps draw order: the same prompts land in the same minibatches at any world size.
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

}  // namespace shardrl
