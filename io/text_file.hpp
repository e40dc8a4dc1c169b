// Small text files of a run (resolved config, later metrics heads): written whole or not at all.
#pragma once

#include <filesystem>
#include <string_view>

namespace shardrl {

// Writes `text` to `<path>.partial`, flushes it to disk and renames it to `path`, creating
// parent directories. Throws InputError naming the path and the system's reason on failure.
void write_text_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace shardrl
