// libFuzzer target: any bytes as a safetensors file. The header parser must either accept them
// (with every byte range inside the file and no two overlapping) or throw InputError; a crash,
// a sanitizer report or another exception is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const shardrl::StHeader h = shardrl::parse_safetensors_header(bytes, size, "fuzz");
    std::uint64_t previous_end = 0;
    for (const auto& t : h.tensors) {
      if (t.begin < previous_end || t.end < t.begin || h.data_offset + t.end > size) std::abort();
      previous_end = t.end;
    }
  } catch (const shardrl::InputError&) {
  }
  return 0;
}
