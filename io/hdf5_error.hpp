// What HDF5 says when a call fails, for messages: its error stack read as text, its automatic
// printing silenced while a file a user handed us is being opened or read, and a check macro
// for internal calls that names the reason (io/hdf5_check.hpp's macro does not).
#pragma once

#include <hdf5.h>

#include <string>

#include "core/error.hpp"

namespace shardrl {

// Silences HDF5's automatic error-stack printing while alive: failures on user files become
// InputErrors carrying the relevant line of the stack, internal failures name it in their fatal
// message.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

struct Hdf5Error {
  std::string innermost;   // the most specific description on the stack
  bool truncated = false;  // some entry says the file is truncated
};

// What the current HDF5 error stack says. Call right after the failing call.
Hdf5Error hdf5_error();
std::string hdf5_error_text();

// Internal HDF5 calls (property lists, dataspaces) fail only on a bug or an unusable machine.
template <class T>
T require_hdf5(T result, const char* call, const char* file, int line) {
  if (result < 0) fatal(std::string(call) + " failed: " + hdf5_error_text(), file, line);
  return result;
}
#define SHARDRL_H5_REQUIRE(call) ::shardrl::require_hdf5((call), #call, __FILE__, __LINE__)

}  // namespace shardrl
