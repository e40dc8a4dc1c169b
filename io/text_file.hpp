// Files of a run written whole or not at all: the resolved config, exported models. A file is
// written to `<path>.partial`, flushed to disk and renamed to `path`, so a reader (or a job
// killed mid-write) sees the old file or the new one, never part of one.
#pragma once

#include <filesystem>
#include <string_view>

namespace shardrl {

// A file written piece by piece (a large export need not be held in memory whole), then
// committed. Destroyed uncommitted (an error on the way), it removes `<path>.partial`.
// Every failure throws InputError naming the path and the system's reason.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);   // creates parent directories and the temporary
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void append(std::string_view bytes);
  void commit();   // flush to disk, rename into place

 private:
  [[noreturn]] void fail(const char* what, const std::filesystem::path& named);
  std::filesystem::path path_, partial_;
  int fd_ = -1;
};

// `text` as a whole file, through AtomicFile.
void write_text_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace shardrl
