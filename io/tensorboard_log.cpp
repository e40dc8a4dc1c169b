#include "io/tensorboard_log.hpp"

#include <unistd.h>

#include <boost/crc.hpp>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/host_name.hpp"

namespace shardrl {
namespace {

// Protobuf wire format, the parts the Event messages use: varints, fixed 64/32-bit numbers and
// length-delimited fields (strings and nested messages).
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire_type) { varint(out, (std::uint64_t(field) << 3) | wire_type); }
void bytes_field(std::string& out, int field, const std::string& value) {
  key(out, field, 2);
  varint(out, value.size());
  out += value;
}
template <class T>
void fixed_field(std::string& out, int field, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  key(out, field, sizeof(T) == 8 ? 1 : 5);
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));   // little-endian hosts (x86-64, aarch64), as the format is
  out.append(raw, sizeof(T));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// tensorflow/core/util/event.proto: Event { double wall_time = 1; int64 step = 2;
// oneof what { string file_version = 3; Summary summary = 5; } }
std::string event(std::int64_t step, double wall_time, const std::string* file_version, const std::string* summary) {
  std::string e;
  fixed_field(e, 1, wall_time);
  key(e, 2, 0);
  varint(e, static_cast<std::uint64_t>(step));
  if (file_version) bytes_field(e, 3, *file_version);
  if (summary) bytes_field(e, 5, *summary);
  return e;
}

// tensorflow/core/framework/summary.proto: Summary { repeated Value value = 1; }
// Value { string tag = 1; float simple_value = 2; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
std::string scalar_value(const std::string& tag, float v) {
  std::string value;
  bytes_field(value, 1, tag);
  fixed_field(value, 2, v);
  return value;
}

// A text summary as TensorBoard's text plugin reads it: metadata.plugin_data.plugin_name =
// "text"; the tensor a scalar DT_STRING (TensorProto { DataType dtype = 1 (DT_STRING = 7);
// TensorShapeProto tensor_shape = 2 (empty: a scalar); repeated bytes string_val = 8; }).
std::string text_value(const std::string& tag, const std::string& text) {
  std::string plugin, metadata, tensor, value;
  bytes_field(plugin, 1, "text");
  bytes_field(metadata, 1, plugin);
  key(tensor, 1, 0);
  varint(tensor, 7);
  bytes_field(tensor, 2, "");
  bytes_field(tensor, 8, text);
  bytes_field(value, 1, tag);
  bytes_field(value, 8, tensor);
  bytes_field(value, 9, metadata);
  return value;
}

std::string summary_of(const std::vector<std::string>& values) {
  std::string s;
  for (const auto& v : values) bytes_field(s, 1, v);
  return s;
}

// TFRecord's checksum: CRC-32C (Castagnoli), rotated right by 15 bits plus a constant, so a
// CRC of data that holds CRCs does not degenerate.
std::uint32_t masked_crc(const char* data, std::size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, n);
  const std::uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string record(const std::string& data) {
  std::string out;
  const std::uint64_t length = data.size();
  char header[8];
  std::memcpy(header, &length, 8);
  out.append(header, 8);
  const std::uint32_t header_crc = masked_crc(header, 8), data_crc = masked_crc(data.data(), data.size());
  out.append(reinterpret_cast<const char*>(&header_crc), 4);
  out += data;
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

std::vector<std::string> scalars(const MetricsRecord& fields) {
  std::vector<std::string> values;
  for (std::size_t i = 1; i < fields.size(); ++i)
    if (std::isfinite(fields[i].second) && fields[i].first != TensorBoardLog::kWallTime)
      values.push_back(scalar_value(TensorBoardLog::tag_of(fields[i].first), static_cast<float>(fields[i].second)));
  return values;
}

std::int64_t step_of(const MetricsRecord& fields) {
  SHARDRL_CHECK(!fields.empty() && fields[0].first == "iteration" && std::isfinite(fields[0].second),
                "a metrics record starts with its iteration");
  return static_cast<std::int64_t>(fields[0].second);
}

double wall_time_of(const MetricsRecord& fields) {
  for (const auto& [name, value] : fields)
    if (name == TensorBoardLog::kWallTime && std::isfinite(value)) return value;
  return now_seconds();
}

}  // namespace

std::string TensorBoardLog::tag_of(const std::string& field) {
  const auto ends_with = [&](const char* suffix) {
    const std::size_t n = std::strlen(suffix);
    return field.size() >= n && field.compare(field.size() - n, n, suffix) == 0;
  };
  if (ends_with("_s") && !ends_with("_per_s")) return "time/" + field;
  return field;
}

TensorBoardLog::TensorBoardLog(const std::filesystem::path& dir, const std::string& config_text,
                               const std::vector<MetricsRecord>& history) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("cannot create the TensorBoard directory '{}': {}", dir.string(), ec.message()));
  const std::string name =
      fmt::format("events.out.tfevents.{:010d}.{}", static_cast<long long>(now_seconds()), host_name());
  path_ = dir / name;
  // Written under a name TensorBoard does not read ("tfevents" absent), then renamed.
  const fs::path partial = dir / ("partial." + std::to_string(getpid()));
  {
    std::ofstream first(partial, std::ios::binary | std::ios::trunc);
    const std::string version = "brain.Event:2";
    const double start = now_seconds();
    first << record(event(0, start, &version, nullptr));
    // The config in a code block, so the text plugin keeps its lines.
    const std::string config = summary_of({text_value("config", "```\n" + config_text + "\n```")});
    first << record(event(0, start, nullptr, &config));
    for (const auto& h : history) {
      const std::string s = summary_of(scalars(h));
      first << record(event(step_of(h), wall_time_of(h), nullptr, &s));
    }
    first.flush();
    if (!first) throw InputError(fmt::format("cannot write the TensorBoard file '{}'", partial.string()));
  }
  fs::rename(partial, path_, ec);
  if (ec) throw InputError(fmt::format("cannot create the TensorBoard file '{}': {}", path_.string(), ec.message()));
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path() != path_ && entry.path().filename().string().find("tfevents") != std::string::npos)
      fs::remove(entry.path(), ec);
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw InputError(fmt::format("cannot append to the TensorBoard file '{}'", path_.string()));
}

void TensorBoardLog::write(const MetricsRecord& fields) {
  const std::string s = summary_of(scalars(fields));
  append(record(event(step_of(fields), wall_time_of(fields), nullptr, &s)));
}

void TensorBoardLog::append(const std::string& data) {
  out_ << data;
  out_.flush();
  if (!out_) throw InputError(fmt::format("cannot write the TensorBoard file '{}'", path_.string()));
}

}  // namespace shardrl
