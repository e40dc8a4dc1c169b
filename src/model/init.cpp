#include "model/init.hpp"

#include <cmath>

namespace shardrl {
namespace {

KOKKOS_INLINE_FUNCTION std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

void init_unit_slice(const ExecSpace& space, const UnitSpec& unit, std::uint64_t seed, float std,
                     std::int64_t begin, std::int64_t end, float* out) {
  // Padding first, then each parameter's part of [begin, end).
  Kokkos::parallel_for("init_zero", Kokkos::RangePolicy<ExecSpace>(space, 0, end - begin),
                       KOKKOS_LAMBDA(const std::int64_t i) { out[i] = 0.0f; });
  for (const auto& p : unit.params) {
    const std::int64_t lo = p.offset > begin ? p.offset : begin;
    const std::int64_t hi = p.offset + p.numel() < end ? p.offset + p.numel() : end;
    if (lo >= hi) continue;
    const std::uint64_t key = splitmix64(seed ^ fnv1a(p.name));
    const std::int64_t offset = p.offset;
    const Init init = p.init;
    const float sigma = p.init_std > 0 ? p.init_std : std;
    Kokkos::parallel_for(
        "init_param", Kokkos::RangePolicy<ExecSpace>(space, lo, hi), KOKKOS_LAMBDA(const std::int64_t g) {
          float value = init == Init::ones ? 1.0f : 0.0f;
          if (init == Init::uniform) {
            const std::uint64_t r = splitmix64(key + static_cast<std::uint64_t>(g - offset));
            value = sigma * (2.0f * (static_cast<float>(r >> 40) + 0.5f) / 16777216.0f - 1.0f);
          } else if (init == Init::normal) {
            // Box-Muller on two 32-bit uniforms in (0, 1].
            std::uint64_t r = splitmix64(key + static_cast<std::uint64_t>(g - offset));
            float u1 = (static_cast<float>(r >> 40) + 1.0f) / 16777216.0f;
            float u2 = static_cast<float>((r >> 16) & 0xffffffull) / 16777216.0f;
            value = sigma * sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
          }
          out[g - begin] = value;
        });
  }
}

}  // namespace shardrl
