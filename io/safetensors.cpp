#include "io/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "io/text_file.hpp"

namespace shardrl {
namespace {

// IEEE half to float, exactly (subnormals, infinities and NaN included).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {   // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

SafetensorsFile::SafetensorsFile(std::filesystem::path path) : path_(std::move(path)) {
  require_input_file(path_, "safetensors file");
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw InputError("cannot open '" + path_.string() + "'");
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path_, ec);
  if (ec) throw InputError("cannot read the size of '" + path_.string() + "': " + ec.message());
  std::string prefix(static_cast<std::size_t>(std::min<std::uint64_t>(size, 8)), '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  if (prefix.size() == 8) {
    const std::uint64_t n = std::min(safetensors_header_length(prefix), std::min(kSafetensorsMaxHeaderBytes, size - 8));
    prefix.resize(static_cast<std::size_t>(8 + n));
    in.read(prefix.data() + 8, static_cast<std::streamsize>(n));
    if (!in) throw InputError("cannot read the header of '" + path_.string() + "'");
  }
  header_ = parse_safetensors_header(prefix, size, path_.string());
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const StTensor& SafetensorsFile::get(const std::string& name) const {
  const StTensor* t = find(name);
  if (!t) throw InputError(path_.string() + ": no tensor '" + name + "'");
  return *t;
}

std::string SafetensorsFile::read_bytes(const std::string& name) const {
  const StTensor& t = get(name);
  std::ifstream in(path_, std::ios::binary);
  std::string bytes(static_cast<std::size_t>(t.end - t.begin), '\0');
  in.seekg(static_cast<std::streamoff>(header_.data_offset + t.begin));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw InputError(path_.string() + ": cannot read tensor '" + name + "'");
  return bytes;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  return read_f32(name, 0, get(name).numel());
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name, std::int64_t first, std::int64_t count) const {
  const StTensor& t = get(name);
  if (first < 0 || count < 0 || first + count > t.numel())
    throw InputError(fmt::format("{}: tensor '{}': elements [{}, {}) of {}", path_.string(), name, first, first + count,
                                 t.numel()));
  const std::size_t size = dtype_size(t.dtype);
  std::ifstream in(path_, std::ios::binary);
  std::string bytes(static_cast<std::size_t>(count) * size, '\0');
  in.seekg(static_cast<std::streamoff>(header_.data_offset + t.begin + static_cast<std::uint64_t>(first) * size));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw InputError(path_.string() + ": cannot read tensor '" + name + "'");
  std::vector<float> out(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < out.size(); ++i) {   // the format is little-endian, as this host
    if (t.dtype == StDtype::f32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      if (t.dtype == StDtype::bf16) {
        bf16 b;
        b.bits = h;
        out[i] = static_cast<float>(b);
      } else {
        out[i] = half_to_float(h);
      }
    }
  }
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<StWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // The header first (every tensor's byte range follows from its shape and dtype), then each
  // tensor's bytes in pieces: the file never sits whole in memory (an 8B model's export would
  // otherwise need its size twice over beside the values).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::pair<std::string, nlohmann::ordered_json>> entries;
  std::uint64_t data_size = 0;
  for (const StWrite& t : tensors) {
    SHARDRL_CHECK(t.dtype != StDtype::f16, "write_safetensors writes F32 or BF16");
    std::int64_t numel = 1;
    for (auto d : t.shape) numel *= d;
    const std::uint64_t begin = data_size;
    data_size += static_cast<std::uint64_t>(numel) * dtype_size(t.dtype);
    entries.emplace_back(t.name, nlohmann::ordered_json{{"dtype", dtype_name(t.dtype)},
                                                        {"shape", t.shape},
                                                        {"data_offsets", {begin, data_size}}});
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [name, entry] : entries) header[name] = std::move(entry);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');   // data 8-byte aligned, as the reference writer pads
  std::string length(8, '\0');
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);

  AtomicFile file(path);
  file.append(length);
  file.append(text);
  constexpr std::int64_t kPiece = 1 << 20;   // elements converted per write
  std::string bytes;
  std::vector<float> filled;   // the tensor `fill` gave, while it is written
  for (const StWrite& t : tensors) {
    std::int64_t numel = 1;
    for (auto d : t.shape) numel *= d;
    const std::size_t size = dtype_size(t.dtype);
    const float* values = t.values;
    if (t.fill) {
      filled.resize(static_cast<std::size_t>(numel));   // fill writes every element
      t.fill(filled.data());
      values = filled.data();
    }
    for (std::int64_t first = 0; first < numel; first += kPiece) {
      const std::int64_t count = std::min(kPiece, numel - first);
      bytes.resize(static_cast<std::size_t>(count) * size);
      if (t.dtype == StDtype::f32) {
        std::memcpy(bytes.data(), values + first, bytes.size());   // little-endian, as this host
      } else {
        for (std::int64_t i = 0; i < count; ++i) {
          const bf16 b(values[first + i]);
          std::memcpy(bytes.data() + 2 * i, &b.bits, 2);
        }
      }
      file.append(bytes);
    }
  }
  file.commit();
}

}  // namespace shardrl
