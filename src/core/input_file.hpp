// Reading a file the user named (a config, a dataset, a model directory's files): it must be a
// readable regular file. A directory, a FIFO, a device or a socket is refused by name before it
// is opened (a directory reads as empty on some systems, a FIFO blocks forever), so bad input
// gets a clear error instead of a silent default or a hang.
#pragma once

#include <filesystem>
#include <string>

namespace shardrl {

// Why `path` is not a readable regular file, or "" when it is (links are followed).
std::string input_file_problem(const std::filesystem::path& path);

// The whole file. InputError "cannot read <what> '<path>': <problem>" when it is not a readable
// regular file ("Is a directory", "a FIFO (named pipe), not a regular file", ...).
std::string read_input_file(const std::filesystem::path& path, const std::string& what);

// InputError as above, without reading (for files read by a library of their own, e.g. HDF5).
void require_input_file(const std::filesystem::path& path, const std::string& what);

}  // namespace shardrl
