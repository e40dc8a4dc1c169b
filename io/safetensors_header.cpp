// The safetensors header: its validation, apart from the file reader so that the fuzz target
// (tests/fuzz/) builds it alone.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_parse_message.hpp"
#include "io/safetensors.hpp"

namespace shardrl {
namespace {

bool parse_dtype(const std::string& s, StDtype& out) {
  if (s == "F32") out = StDtype::f32;
  else if (s == "BF16") out = StDtype::bf16;
  else if (s == "F16") out = StDtype::f16;
  else return false;
  return true;
}

std::uint64_t read_u64_le(const std::string& s) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[static_cast<std::size_t>(i)]);
  return v;
}

}  // namespace

std::uint64_t safetensors_header_length(const std::string& prefix) { return read_u64_le(prefix); }

std::size_t dtype_size(StDtype d) { return d == StDtype::f32 ? 4 : 2; }

std::int64_t StTensor::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

const char* dtype_name(StDtype dtype) {
  switch (dtype) {
    case StDtype::f32: return "F32";
    case StDtype::bf16: return "BF16";
    case StDtype::f16: return "F16";
  }
  return "?";
}

StHeader parse_safetensors_header(const std::string& prefix, std::uint64_t file_size, const std::string& where) {
  auto fail = [&](const std::string& problem) -> void { throw InputError(where + ": " + problem); };
  if (file_size < 8 || prefix.size() < 8)
    fail(fmt::format("{} bytes: too short for a safetensors file (8-byte header length first)", file_size));
  const std::uint64_t n = read_u64_le(prefix);
  if (n > kSafetensorsMaxHeaderBytes)
    fail(fmt::format("header length {} exceeds the format's limit of {} bytes", n, kSafetensorsMaxHeaderBytes));
  if (n > file_size - 8) fail(fmt::format("header length {} runs past the end of the file ({} bytes)", n, file_size));
  if (prefix.size() < 8 + n) fail("header truncated");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(prefix.begin() + 8, prefix.begin() + static_cast<std::ptrdiff_t>(8 + n));
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("header is not valid JSON: ") + json_parse_message(e.what()));
  }
  if (!j.is_object()) fail("header is not a JSON object");
  StHeader h;
  h.data_offset = 8 + n;
  const std::uint64_t data_size = file_size - h.data_offset;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(fmt::format("__metadata__ value of '{}' is not a string", m.key()));
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor '" + name + "'";
    if (!v.is_object()) fail(t + " is not an object");
    StTensor x;
    x.name = name;
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail(t + ": no dtype string");
    if (!parse_dtype(v["dtype"].get<std::string>(), x.dtype))
      fail(fmt::format("{}: dtype {} is not one shardrl reads (F32, BF16, F16)", t, v["dtype"].get<std::string>()));
    if (!v.contains("shape") || !v["shape"].is_array()) fail(t + ": no shape array");
    std::int64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0))
        fail(t + ": shape holds something other than non-negative integers");
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          (numel > 0 && dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / numel)))
        fail(t + ": shape too large");
      x.shape.push_back(static_cast<std::int64_t>(dim));
      numel *= static_cast<std::int64_t>(dim);
    }
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2 ||
        !v["data_offsets"][0].is_number_unsigned() || !v["data_offsets"][1].is_number_unsigned())
      fail(t + ": data_offsets is not a pair of non-negative integers");
    x.begin = v["data_offsets"][0].get<std::uint64_t>();
    x.end = v["data_offsets"][1].get<std::uint64_t>();
    if (x.begin > x.end) fail(fmt::format("{}: data_offsets [{}, {}] run backwards", t, x.begin, x.end));
    if (x.end > data_size)
      fail(fmt::format("{}: data_offsets [{}, {}] run past the data section ({} bytes)", t, x.begin, x.end, data_size));
    const std::uint64_t want = static_cast<std::uint64_t>(numel) * dtype_size(x.dtype);
    if (numel > 0 && want / static_cast<std::uint64_t>(numel) != dtype_size(x.dtype)) fail(t + ": shape too large");
    if (x.end - x.begin != want)
      fail(fmt::format("{}: {} bytes in data_offsets, but {} elements of {} take {}", t, x.end - x.begin, numel,
                       dtype_name(x.dtype), want));
    h.tensors.push_back(std::move(x));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const StTensor& a, const StTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (std::size_t i = 1; i < h.tensors.size(); ++i)
    if (h.tensors[i].begin < h.tensors[i - 1].end)
      fail(fmt::format("tensors '{}' and '{}' overlap in the data section", h.tensors[i - 1].name, h.tensors[i].name));
  return h;
}

}  // namespace shardrl
