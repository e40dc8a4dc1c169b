// The HDF5 check macro. (HDF5 defines H5CHECK itself: our name is SHARDRL_CHECK_HDF5.)
#pragma once

#include <hdf5.h>

namespace shardrl {
[[noreturn]] void fail_hdf5(const char* call, const char* file, int line);
}

// HDF5 calls return a negative herr_t/hid_t on failure.
#define SHARDRL_CHECK_HDF5(call)                                                    \
  ([&]() {                                                                          \
    auto shardrl_h5_result_ = (call);                                               \
    if (shardrl_h5_result_ < 0) ::shardrl::fail_hdf5(#call, __FILE__, __LINE__);    \
    return shardrl_h5_result_;                                                      \
  }())
