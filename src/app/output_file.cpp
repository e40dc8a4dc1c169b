#include "app/output_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shardrl {

std::string output_file_problem(const std::filesystem::path& path, const std::string& flag) {
  const std::string name = path.string();
  std::error_code ec;
  if (!path.has_filename() || std::filesystem::is_directory(path, ec))
    return fmt::format("{} {}: names a directory, not a file", flag, name);
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::filesystem::create_directories(dir, ec);
  if (ec) return fmt::format("{} {}: cannot create directory '{}': {}", flag, name, dir.string(), ec.message());
  // The writer's own temporary, created and removed: the directory takes new files.
  const std::string probe = name + ".partial";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("{} {}: cannot create '{}': {}", flag, name, probe, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  // An existing file is replaced by a rename, which a sticky directory (/tmp) allows only the
  // file's owner, the directory's, or root.
  struct stat file {}, parent {};
  const uid_t me = ::geteuid();
  if (::stat(name.c_str(), &file) == 0 && ::stat(dir.c_str(), &parent) == 0 && (parent.st_mode & S_ISVTX) != 0 &&
      me != 0 && file.st_uid != me && parent.st_uid != me)
    return fmt::format("{} {}: another user's file in a sticky directory, which this job cannot replace", flag, name);
  return "";
}

}  // namespace shardrl
