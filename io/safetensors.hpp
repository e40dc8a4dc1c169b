// Hugging Face safetensors files: an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range in the data that follows, then the data
// (https://huggingface.co/docs/safetensors). The reader validates the whole header before
// anything is read: its length within the file, the JSON, known dtypes, shapes, byte ranges
// inside the data and of the size dtype and shape give, no two ranges overlapping. Every error
// names the file and, where there is one, the tensor. The writer writes atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace shardrl {

enum class StDtype { f32, bf16, f16 };

// The format's limit on the header (the reference implementation's): 100 MB.
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;   // byte range in the data section
  std::int64_t numel() const;
};

struct StHeader {
  std::vector<StTensor> tensors;                  // in the order of their byte ranges
  std::map<std::string, std::string> metadata;    // "__metadata__" (string values only)
  std::uint64_t data_offset = 0;                  // where the data section starts in the file
};

// Validates the header of a file of `file_size` bytes whose first bytes are `prefix` (at least
// the 8-byte length and the header it announces; the fuzz target passes whole inputs). Throws
// InputError "<where>: <problem>".
StHeader parse_safetensors_header(const std::string& prefix, std::uint64_t file_size, const std::string& where);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::filesystem::path path);   // reads and validates the header

  const std::filesystem::path& path() const { return path_; }
  const StHeader& header() const { return header_; }
  const StTensor* find(const std::string& name) const;   // null if absent
  // The tensor's values as fp32 (bf16 and f16 widen exactly); or only the flattened elements
  // [first, first + count), read alone (a rank's slice of a large tensor).
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<float> read_f32(const std::string& name, std::int64_t first, std::int64_t count) const;
  // The tensor's bytes as stored.
  std::string read_bytes(const std::string& name) const;

 private:
  const StTensor& get(const std::string& name) const;
  std::filesystem::path path_;
  StHeader header_;
};

// A tensor to write: fp32 values, stored as `dtype` (f32, or bf16 rounded to nearest even).
// The values are `values`, or when `fill` is set what it puts in a buffer of the tensor's size
// when the writer reaches the tensor: an export then holds one tensor at a time, not the model.
struct StWrite {
  std::string name;
  std::vector<std::int64_t> shape;
  StDtype dtype = StDtype::f32;
  const float* values = nullptr;
  std::function<void(float* out)> fill = {};
};

// Writes the tensors (data in the given order, header keys sorted as the format's reference
// writer does) to `<path>.partial`, then renames it to `path`.
void write_safetensors(const std::filesystem::path& path, const std::vector<StWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

const char* dtype_name(StDtype dtype);   // "F32", "BF16", "F16"
std::size_t dtype_size(StDtype dtype);   // bytes per element
// The header length a file's first 8 bytes announce (little-endian).
std::uint64_t safetensors_header_length(const std::string& prefix);

}  // namespace shardrl
