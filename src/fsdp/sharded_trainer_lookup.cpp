// The embedding's lookup between ranks as rows of the ranks' tokens rather than as the
// (vocab, d_model) table, where lookup_as_rows (fsdp/lookup_rows.hpp): its forward without
// gathering the table, and its own gradient without reduce-scattering one. The schedule that
// calls them is in sharded_trainer.cpp.
#include "fsdp/sharded_trainer.hpp"

#include <type_traits>

#include "core/trace.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"

namespace shardrl {

// Every step would open with an all-gather of the whole table (llama-1b: 525 MB in bf16),
// with no compute to hide it. Instead the ranks all-gather their tokens' ids, each writes the
// part of every rank's rows that lies in its slice, zeros elsewhere
// (kernels::embedding_forward_owned), and a reduce-scatter in the compute type leaves each rank
// its own tokens' rows (ranks x tokens x d_model: llama-1b at 2 x 4096 tokens, 34 MB). Each
// element of the sum has one nonzero term, so the rows are the lookup's bits (but for a weight
// of -0, which comes back +0).
void ShardedTrainer::forward_lookup_rows() {
  const TraceSpan span("lookup forward", 0);
  const double t = now();
  const UnitShard& s = layout_.unit(0);
  const int ranks = layout_.world_size(), rank = layout_.rank();
  const int N = model_.lookup_rows_capacity();
  const ModelShape& shape = model_.options().shape;
  const StreamRef comm{comm_stream_.get()};
  std::int32_t* ids = lookup_ids_.data();
  // The batch's tokens are set (in stream order) and the rows buffer's last readers are done.
  compute_point_.record(compute_stream());
  compute_point_.wait(comm_stream_.get());
  comm_.all_gather(model_.batch_tokens(), ids, static_cast<std::size_t>(N), comm);
  looked_up_.record(comm_stream_.get());
  looked_up_.wait(compute_stream());
  const long lo = long(rank) * s.shard;
  auto look_up = [&](auto* rows) {   // the compute type: what the slices hold
    using T = std::remove_pointer_t<decltype(rows)>;
    kernels::embedding_forward_owned(space_, ids, static_cast<const T*>(gather_source(0)), lo, lo + s.shard,
                                     shape.vocab_size, rows, ranks * N, shape.d_model);
    compute_point_.record(compute_stream());
    compute_point_.wait(comm_stream_.get());
    comm_.reduce_scatter(rows, static_cast<T*>(model_.embedded()), static_cast<std::size_t>(N) * shape.d_model,
                         ReduceOp::sum, comm);
  };
  // The rows buffer is fp32-sized (the gradient's rows); a bf16 forward uses half of it.
  void* rows = lookup_row_sums_.data();
  if (compute_data_type() == DataType::bf16) look_up(static_cast<bf16*>(rows));
  else look_up(static_cast<float*>(rows));
  looked_up_.record(comm_stream_.get());
  profile_.all_gathers += 1;
  profile_.all_gather_bytes += static_cast<std::int64_t>(ranks) * N * 4;
  profile_.reduce_scatters += 1;
  profile_.reduce_scatter_bytes +=
      static_cast<std::int64_t>(ranks) * N * shape.d_model * static_cast<std::int64_t>(model_.compute_type_size());
  if (options_.profile) {   // before unit 1's gather, which counts its own time
    comm_.synchronize(comm);
    const double spent = now() - t;
    profile_.gather_s += spent;
    profile_.lookup_s += spent;
  }
  prefetch(1);   // behind the exchange on the communication stream: the rows are needed first
  looked_up_.wait(compute_stream());
  const TraceSpan forward_span("forward unit", 0);
  const double t_forward = now();
  model_.forward_embedded();
  if (options_.profile) {
    space_.fence();
    profile_.compute_s += now() - t_forward;
  }
}

// The embedding's own gradient is its lookup's: nonzero only in the rows of the batch's tokens.
// Rather than zero, fill and reduce-scatter a vocabulary-sized buffer at the end of backward,
// where no compute is left to hide it (qwen3-0.6b: 622 MB in fp32), and gather the embedding's
// weights for it, which it does not read, each rank sums its distinct tokens' rows
// (kernels::embedding_backward_rows), the ranks all-gather those rows, and each adds the ones
// in its slice in rank order (kernels::embedding_rows_add) into buffer 0's receive slice, which
// finish_reduce then takes as a reduce-scatter's. The sums are a reduce-scatter's: per rank in
// position order, then over ranks (at two ranks the same bits).
void ShardedTrainer::reduce_lookup_rows() {
  const TraceSpan span("lookup rows", 0);
  const double t = now();
  const int b = 0;   // buffer 0's receive slice holds the largest unit's
  const UnitShard& s = layout_.unit(0);
  const int ranks = layout_.world_size(), rank = layout_.rank();
  const int N = model_.lookup_rows_capacity(), D = model_.options().shape.d_model;
  const long row_floats = static_cast<long>(N) * D;
  std::int32_t* ids = lookup_ids_.data();
  float* rows = lookup_row_sums_.data();
  model_.embedding_backward_rows(ids + long(rank) * N, rows + rank * row_floats);
  const StreamRef comm{comm_stream_.get()};
  grad_ready_[b].record(compute_stream());
  grad_ready_[b].wait(comm_stream_.get());
  comm_.all_gather(ids + long(rank) * N, ids, static_cast<std::size_t>(N), comm);
  comm_.all_gather(rows + rank * row_floats, rows, static_cast<std::size_t>(row_floats), comm);
  // The receive slice is taken only now: the rows above did not wait for its reduce-scatter.
  if (pending_[b] >= 0) finish_reduce(b);
  rows_gathered_.record(comm_stream_.get());
  rows_gathered_.wait(compute_stream());
  // This rank's slice is [rank x shard, (rank + 1) x shard) of the unit, whose table starts at 0.
  const bool bf16_reduce = options_.reduce_dtype == GradDtype::bf16;
  float* slice = bf16_reduce ? grad_full_[b].data() : recv_f32_[b].data();
  const long lo = long(rank) * s.shard;
  kernels::fill(space_, slice, 0.0f, s.shard);
  for (int r = 0; r < ranks; ++r)
    kernels::embedding_rows_add(space_, ids + long(r) * N, rows + r * row_floats, N, D, lo, lo + s.shard, slice);
  if (bf16_reduce) kernels::cast(space_, slice, recv_bf16_[b].data(), s.shard);
  reduced_[b].record(compute_stream());
  pending_[b] = 0;
  profile_.all_gathers += 2;
  profile_.all_gather_bytes += static_cast<std::int64_t>(ranks) * N * (D + 1) * 4;
  if (options_.profile) {
    space_.fence();
    const double spent = now() - t;
    profile_.reduce_s += spent;
    profile_.lookup_s += spent;
  }
}

}  // namespace shardrl
