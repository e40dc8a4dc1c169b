#include "app/trace_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

std::string trace_path_problem(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  if (!path.has_filename() || std::filesystem::is_directory(path, ec))
    return fmt::format("--trace {}: names a directory, not a file", name);
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::filesystem::create_directories(dir, ec);
  if (ec) return fmt::format("--trace {}: cannot create directory '{}': {}", name, dir.string(), ec.message());
  // The writer's own temporary, created and removed: the directory takes new files.
  const std::string probe = name + ".partial";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("--trace {}: cannot create '{}': {}", name, probe, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  // An existing file is replaced by a rename, which a sticky directory (/tmp) allows only the
  // file's owner, the directory's, or root.
  struct stat file {}, parent {};
  const uid_t me = ::geteuid();
  if (::stat(name.c_str(), &file) == 0 && ::stat(dir.c_str(), &parent) == 0 && (parent.st_mode & S_ISVTX) != 0 &&
      me != 0 && file.st_uid != me && parent.st_uid != me)
    return fmt::format("--trace {}: another user's file in a sticky directory, which this job cannot replace", name);
  return "";
}

}  // namespace shardrl
