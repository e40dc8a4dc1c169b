// A directory's files replaced as one set. An export's weights, config.json and tokenizer files
// are written into <dir>/.shardrl-export.partial/ and moved into <dir> only once every one of them
// is written: an export stopped part way (minutes for a large model: a kill, a full disk) leaves
// the directory's earlier files, or none, never new weights beside an old or missing config.json.
// The staging folder lies inside <dir>, on its file system, so each move is a rename.
#pragma once

#include <filesystem>
#include <string>

namespace shardrl {

class StagedDirectory {
 public:
  // Creates `dir` if absent and an empty staging folder in it; one left by an export that was
  // killed is removed first (stale_removed() says so). Failures: InputError naming the path.
  explicit StagedDirectory(const std::filesystem::path& dir);
  // Uncommitted (an error on the way): the staging folder and what it holds are removed.
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // Where the files are written.
  const std::filesystem::path& staging() const { return staging_; }
  bool stale_removed() const { return stale_removed_; }

  // Moves every staged file into the directory, replacing files of the same names, `last` after
  // the others (the file a loader opens first, e.g. config.json), flushes the directory's entries
  // and removes the staging folder.
  void commit(const std::string& last);

  static constexpr const char* kStagingName = ".shardrl-export.partial";

 private:
  std::filesystem::path dir_, staging_;
  bool stale_removed_ = false;
  bool committed_ = false;
};

}  // namespace shardrl
