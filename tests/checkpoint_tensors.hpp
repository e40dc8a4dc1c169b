// The CLI tests' check of an exported safetensors file against the checkpoint it came from.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "core/bf16.hpp"
#include "io/safetensors.hpp"

namespace cli_test {

// Every tensor of a safetensors file equals the checkpoint's /model/<name> (its name without
// `prefix`), exactly in fp32 and as its bf16 rounding in bf16. Returns the tensors compared.
inline int expect_tensors_are_the_checkpoints(const fs::path& file, const fs::path& ckpt, const std::string& dtype,
                                       const std::string& prefix = "") {
  shardrl::SafetensorsFile st(file);
  hid_t f = H5Fopen(ckpt.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << ckpt;
  int compared = 0;
  for (const shardrl::StTensor& t : st.header().tensors) {
    EXPECT_EQ(t.name.rfind(prefix, 0), 0u) << t.name;
    const std::string name = t.name.substr(prefix.size());
    hid_t d = H5Dopen2(f, ("/model/" + name).c_str(), H5P_DEFAULT);
    EXPECT_GE(d, 0) << name;
    if (d < 0) continue;
    std::vector<float> want(static_cast<std::size_t>(t.numel()));
    EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, want.data()), 0);
    H5Dclose(d);
    const std::vector<float> got = st.read_f32(t.name);
    EXPECT_EQ(got.size(), want.size()) << t.name;
    for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
      const float expect = dtype == "fp32" ? want[i] : static_cast<float>(shardrl::bf16(want[i]));
      if (got[i] != expect) {
        ADD_FAILURE() << dtype << " " << t.name << "[" << i << "]: " << got[i] << ", checkpoint " << expect;
        break;
      }
    }
    ++compared;
  }
  H5Fclose(f);
  return compared;
}

}  // namespace cli_test
