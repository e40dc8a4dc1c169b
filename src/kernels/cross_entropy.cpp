// The one non-template kernel of the family, compiled once: an extended device lambda inside
// an inline function defined in several translation units is an ODR hazard under nvcc (seen: a
// jump to address 0 in a Release build that linked two copies).
#include "kernels/cross_entropy.hpp"

namespace shardrl::kernels {

void masked_nll(const ExecSpace& space, const float* logp, const float* mask, float scale,
                float* loss, float* dlogp, int N) {
  // A single team reduces and then adds into *loss itself: no device scalar to allocate and no
  // host round trip. Masked-out tokens are skipped rather than multiplied by 0, so padding whose
  // logp is inf or NaN still contributes nothing.
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "masked_nll", Policy(space, 1, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        float sum = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, N),
            [&](const int n, float& acc) {
              const float m = mask[n];
              dlogp[n] = -scale * m;
              if (m != 0.0f) acc += m * logp[n];
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { *loss += -scale * sum; });
      });
}

}  // namespace shardrl::kernels
