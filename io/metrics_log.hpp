// The per-iteration metrics log of a run (metrics.jsonl): one JSON object of named numbers per
// line, appended and flushed as each iteration finishes. io/ knows nothing about what the
// numbers mean; the caller names them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace shardrl {

// One JSON object per line, keys in the order given, e.g.
//   {"iteration":3,"reward_mean":0.5,"loss":1.25e-05,"kl":null}
// Values are doubles; a value that is integral with |v| < 2^53 is written as an integer (no
// fraction), any other finite value in the shortest form that reads back to the same double, and
// a non-finite value (NaN, +-inf) as null (JSON has no NaN). Every record is flushed when written,
// so a killed job keeps every finished iteration. One writer per file (rank 0).
class MetricsLog {
 public:
  // Opens `path` (its parent directory must exist) for appending, creating it if absent. A resumed
  // run continues the file: lines whose "iteration" is >= first_iteration are dropped when the
  // first record is written, so the log never holds an iteration twice, and a job that writes none
  // (it fails, or is killed, before its first iteration ends) drops nothing. The file is rewritten
  // (atomically, write_text_atomically) only when something must change; otherwise it is left
  // untouched and appended to.
  // Blank lines are ignored. A last line without its newline is an unfinished record of a killed
  // job: it is dropped if it does not parse (and kept, terminated, if it does). Any other line that
  // is not a JSON object with a numeric "iteration" is an InputError naming "file:line", as is a
  // file that cannot be read or opened. With `keep_at_first_unless`, a record at first_iteration
  // exactly that lacks that key is kept too (a finished run's final evaluation, whose record has
  // no iteration fields, while a record of an iteration past the run's checkpoint is dropped).
  MetricsLog(const std::filesystem::path& path, std::int64_t first_iteration,
             const std::string& keep_at_first_unless = "");

  // Appends one record and flushes it. fields[0] must be ("iteration", finite value) and keys must
  // be distinct (a bug otherwise: fatal). A failed write is an InputError naming the file.
  void write(const std::vector<std::pair<std::string, double>>& fields);

  const std::filesystem::path& path() const { return path_; }
  // The records the run continues from (read_metrics's form): those of iterations before
  // first_iteration, whether or not the first record has been written yet.
  std::vector<std::vector<std::pair<std::string, double>>> kept_records() const;

 private:
  void open_for_appending();

  std::filesystem::path path_;
  std::ofstream out_;
  std::string kept_;               // the file's lines the run keeps
  bool rewrite_pending_ = false;   // the file holds more than kept_ (or an unterminated line)
};

// Reads a metrics file back (for tests and tools): one vector of (key, value) per non-blank line,
// "iteration" first, then the other keys in file order, null read as NaN. A missing file, or a
// line that is not a JSON object of numbers and nulls with a numeric "iteration", is an
// InputError naming the file (and "file:line").
std::vector<std::vector<std::pair<std::string, double>>> read_metrics(
    const std::filesystem::path& path);

// The same of a file's text already read (`path` names it in messages).
std::vector<std::vector<std::pair<std::string, double>>> metrics_records(const std::string& text,
                                                                         const std::filesystem::path& path);

}  // namespace shardrl
