#include "app/trace_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "io/text_file.hpp"
#include "mpi/host_exchange.hpp"

namespace shardrl {

void write_trace_file(MPI_Comm comm, const std::string& host, const std::filesystem::path& path) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // This rank's track: its name, then one complete event ("ph": "X") per span, times in µs.
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0},
                    {"args", {{"name", "rank " + std::to_string(rank) + " (" + host + ")"}}}});
  events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0},
                    {"args", {{"sort_index", rank}}}});
  const std::int64_t dropped = Trace::dropped();
  for (const TraceEvent& e : Trace::take())
    events.push_back({{"ph", "X"}, {"name", e.name}, {"pid", rank}, {"tid", 0}, {"ts", e.start_us},
                      {"dur", e.duration_us}, {"args", {{"depth", e.depth}}}});
  if (dropped > 0) spdlog::warn("trace: {} spans past the recorder's capacity were left out on rank {}", dropped, rank);
  const std::vector<std::string> parts = gather_strings(comm, events.dump(), 0);
  run_on_root(comm, 0, [&] {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& part : parts)
      for (auto& e : nlohmann::json::parse(part)) all.push_back(std::move(e));
    write_text_atomically(path, nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}}.dump());
    spdlog::info("trace of {} ranks in {} (open it in https://ui.perfetto.dev)", parts.size(), path.string());
  });
}

}  // namespace shardrl
