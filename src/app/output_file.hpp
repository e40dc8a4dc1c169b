// A file a command writes at its end (train --trace, evaluate --out), checked at its start so
// that a bad path stops it before the work rather than after.
#pragma once

#include <filesystem>
#include <string>

namespace shardrl {

// Whether `path` can take the file (rank 0): "" or the problem, naming `flag` and the path. Its
// directory is created; a probe file beside it (`path`.partial, write_text_atomically's own
// temporary) is created and removed; an existing file must be one the job may replace.
std::string output_file_problem(const std::filesystem::path& path, const std::string& flag);

}  // namespace shardrl
