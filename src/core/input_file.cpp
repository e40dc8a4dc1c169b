#include "core/input_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace shardrl {

std::string input_file_problem(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return std::strerror(ENOENT);
  if (fs::is_directory(st)) return std::strerror(EISDIR);
  if (fs::is_fifo(st)) return "a FIFO (named pipe), not a regular file";
  if (!fs::is_regular_file(st)) return "not a regular file";
  if (::access(path.c_str(), R_OK) != 0) return std::strerror(errno);
  return "";
}

void require_input_file(const std::filesystem::path& path, const std::string& what) {
  if (const std::string problem = input_file_problem(path); !problem.empty())
    throw InputError(fmt::format("cannot read {} '{}': {}", what, path.string(), problem));
}

std::string read_input_file(const std::filesystem::path& path, const std::string& what) {
  require_input_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read {} '{}': {}", what, path.string(), std::strerror(errno)));
  // Read in large blocks into room for the whole file (a tokenizer.json is 10 MB or more: a
  // string stream grew by doubling and then copied it once more).
  std::string text;
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec) text.reserve(size);
  std::vector<char> block(1 << 20);
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0)
    text.append(block.data(), static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw InputError(fmt::format("cannot read {} '{}': read failed", what, path.string()));
  return text;
}

}  // namespace shardrl
