#include "io/metrics_log.hpp"
#include "io/json_parse_message.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "io/text_file.hpp"

namespace shardrl {
namespace {

using Json = nlohmann::ordered_json;

constexpr double kTwoPow53 = 9007199254740992.0;   // integers beyond this are not all exact

// Reads the whole file. Returns false (and leaves `text` empty) when it does not exist.
bool read_file_if_exists(const std::filesystem::path& path, std::string& text) {
  text.clear();
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (errno == ENOENT) return false;
    throw InputError(fmt::format("cannot read metrics file '{}': {}", path.string(), std::strerror(errno)));
  }
  char buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;   // a directory opens, then fails here with EISDIR
  std::fclose(f);
  if (failed)
    throw InputError(fmt::format("cannot read metrics file '{}': {}", path.string(), std::strerror(err)));
  return true;
}


bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

struct Line {
  std::string_view text;
  std::size_t number = 0;   // 1-based
  bool terminated = false;  // ends with '\n' (a complete record)
};

template <class Fn>
void for_each_line(const std::string& text, Fn&& fn) {
  std::size_t pos = 0;
  std::size_t number = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    const bool terminated = end != std::string::npos;
    if (!terminated) end = text.size();
    fn(Line{std::string_view(text).substr(pos, end - pos), ++number, terminated});
    pos = end + 1;
  }
}

// Parses one line as a JSON object. Returns false for an unfinished last line (no newline) that
// does not parse: the record a killed job was writing. Throws InputError for anything else bad.
bool parse_object(const Line& line, const std::string& where, Json& obj) {
  try {
    obj = Json::parse(line.text.begin(), line.text.end());
  } catch (const Json::exception& e) {   // parse_error, or out_of_range for a number like 1e999
    if (!line.terminated) return false;
    throw InputError(fmt::format("{}: not valid JSON ({})", where, json_parse_message(e.what())));
  }
  if (!obj.is_object())
    throw InputError(fmt::format("{}: expected a JSON object, got {}", where, obj.type_name()));
  return true;
}

std::string where(const std::filesystem::path& path, std::size_t line_number) {
  return fmt::format("{}:{}", path.string(), line_number);
}

Json json_number(double v) {
  if (!std::isfinite(v)) return Json(nullptr);
  if (std::trunc(v) == v && std::fabs(v) < kTwoPow53) return Json(static_cast<std::int64_t>(v));
  return Json(v);
}

}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& path, std::int64_t first_iteration,
                       const std::string& keep_at_first_unless)
    : path_(path) {
  std::string text;
  if (read_file_if_exists(path_, text) && !text.empty()) {
    std::string kept;
    std::size_t dropped = 0;
    bool torn = false;
    // A file that does not end in a newline is rewritten terminated, so that the next record
    // starts on a line of its own.
    bool rewrite = text.back() != '\n';
    for_each_line(text, [&](const Line& line) {
      if (is_blank(line.text)) return;
      const std::string at = where(path_, line.number);
      Json obj;
      if (!parse_object(line, at, obj)) {
        torn = true;
        return;
      }
      const auto it = obj.find("iteration");
      if (it == obj.end() || !it->is_number())
        throw InputError(fmt::format("{}: expected a numeric \"iteration\" field", at));
      const bool kept_at_first = !keep_at_first_unless.empty() &&
                                 it->get<double>() == static_cast<double>(first_iteration) &&
                                 !obj.contains(keep_at_first_unless);
      if (it->get<double>() >= static_cast<double>(first_iteration) && !kept_at_first) {
        ++dropped;
        rewrite = true;
        return;
      }
      kept.append(line.text);
      kept.push_back('\n');
    });
    if (torn)
      spdlog::warn("metrics log '{}': dropped an unfinished last line (a killed job's last record)",
                   path_.string());
    if (dropped > 0)
      spdlog::info("metrics log '{}': {} record(s) of iteration >= {} are replaced from this job's first: the run "
                   "continues from there",
                   path_.string(), dropped, first_iteration);
    kept_ = std::move(kept);
    rewrite_pending_ = rewrite;
  }
  // Opened now, so that a log it may not write stops the job at its start; rewritten only when the
  // first record comes (a job that fails or is killed before writing one must not drop records
  // that its checkpoint does not replace, e.g. one resumed from an older checkpoint than `latest`).
  open_for_appending();
}

void MetricsLog::open_for_appending() {
  out_.open(path_, std::ios::out | std::ios::app | std::ios::binary);
  if (!out_)
    throw InputError(fmt::format("cannot open metrics log '{}' for appending: {}", path_.string(),
                                 std::strerror(errno)));
}

std::vector<std::vector<std::pair<std::string, double>>> MetricsLog::kept_records() const {
  return metrics_records(kept_, path_);
}

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  SHARDRL_CHECK(!fields.empty() && fields.front().first == "iteration",
                "a metrics record starts with its \"iteration\"");
  SHARDRL_CHECK(std::isfinite(fields.front().second), "a metrics record's iteration is finite");
  Json obj = Json::object();
  for (const auto& [key, value] : fields) {
    SHARDRL_CHECK(!obj.contains(key), "metrics key '" + key + "' appears twice in one record");
    obj[key] = json_number(value);
  }
  std::string line = obj.dump(-1, ' ', false, Json::error_handler_t::replace);
  line.push_back('\n');
  if (rewrite_pending_) {   // the records this job replaces go now, and the new one follows
    out_.close();
    write_text_atomically(path_, kept_);
    rewrite_pending_ = false;
    open_for_appending();
  }
  out_.write(line.data(), static_cast<std::streamsize>(line.size()));
  out_.flush();
  if (!out_)
    throw InputError(fmt::format("cannot write metrics log '{}': {}", path_.string(), std::strerror(errno)));
}

std::vector<std::vector<std::pair<std::string, double>>> read_metrics(
    const std::filesystem::path& path) {
  std::string text;
  if (!read_file_if_exists(path, text))
    throw InputError(fmt::format("cannot read metrics file '{}': {}", path.string(), std::strerror(ENOENT)));
  return metrics_records(text, path);
}

std::vector<std::vector<std::pair<std::string, double>>> metrics_records(const std::string& text,
                                                                         const std::filesystem::path& path) {
  std::vector<std::vector<std::pair<std::string, double>>> records;
  for_each_line(text, [&](const Line& line) {
    if (is_blank(line.text)) return;
    const std::string at = where(path, line.number);
    Json obj;
    if (!parse_object(line, at, obj)) return;   // a record still being written
    // Every record has its iteration, first: readers take it from the front.
    const auto iteration = obj.find("iteration");
    if (iteration == obj.end() || !iteration->is_number())
      throw InputError(fmt::format("{}: expected a numeric \"iteration\" field", at));
    std::vector<std::pair<std::string, double>> record;
    record.reserve(obj.size());
    record.emplace_back("iteration", iteration->get<double>());
    for (const auto& [key, value] : obj.items()) {
      if (key == "iteration") continue;
      if (value.is_null()) {
        record.emplace_back(key, std::numeric_limits<double>::quiet_NaN());
      } else if (value.is_number()) {
        record.emplace_back(key, value.get<double>());
      } else {
        throw InputError(fmt::format("{}: value of \"{}\" must be a number or null, got {}", at, key,
                                     value.type_name()));
      }
    }
    records.push_back(std::move(record));
  });
  return records;
}

}  // namespace shardrl
