// The element types a job chooses between: the compute type of weights, activations and GEMM
// inputs (Precision), and the storage type of gradient slices, reduce-scatters and Adam moments
// (GradDtype). Lower layers take these from their options structs; the Config holds the user's.
#pragma once

namespace shardrl {

enum class Precision { bf16, fp32 };
enum class GradDtype { fp32, bf16 };

}  // namespace shardrl
