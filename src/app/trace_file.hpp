// `shardrl train --trace FILE`: every rank's spans (core/trace.hpp) merged by rank 0 into one
// Chrome trace-event file, one track (process) per rank named "rank R (host)", which Perfetto
// (ui.perfetto.dev) and chrome://tracing open. Collective over `comm`.
#pragma once

#include <mpi.h>

#include <filesystem>
#include <string>

namespace shardrl {

// Rank 0 writes the file; a failure there stops every rank alike (an InputError with its cause).
void write_trace_file(MPI_Comm comm, const std::string& host, const std::filesystem::path& path);

}  // namespace shardrl
