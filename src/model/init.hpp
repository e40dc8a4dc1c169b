// Fresh initialisation of parameters, on the device. Each element's value is a function of
// (seed, parameter name, element index) alone, so any slice of any unit can be initialised on
// its own and a model is the same at every world size.
#pragma once

#include <cstdint>

#include "core/kokkos.hpp"
#include "model/param_spec.hpp"

namespace shardrl {

// Writes elements [begin, end) of `unit`'s flat buffer (padding between parameters gets 0)
// into out[0 .. end-begin): normal(0, std) for matrices, 1 for norm weights.
void init_unit_slice(const ExecSpace& space, const UnitSpec& unit, std::uint64_t seed, float std,
                     std::int64_t begin, std::int64_t end, float* out);

}  // namespace shardrl
