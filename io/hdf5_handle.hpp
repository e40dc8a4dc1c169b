// Move-only owner of an HDF5 identifier (file, group, dataset, dataspace, property list,
// attribute, datatype). The destructor closes it with the matching H5?close and never throws;
// close() does the same and reports the call's status.
#pragma once

#include <hdf5.h>

namespace shardrl {

class H5Handle {
 public:
  H5Handle() = default;
  explicit H5Handle(hid_t id) : id_(id) {}   // takes ownership of a valid id
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  H5Handle& operator=(H5Handle&& other) noexcept;
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  void reset() noexcept { close(); }
  // Closes the id now and returns what the H5?close call returned (negative: it failed, e.g. a
  // file's last write-back); the handle is empty afterwards either way.
  herr_t close() noexcept;

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Number of HDF5 identifiers open in this process (files, groups, datasets, ...), for leak tests.
long open_hdf5_objects();

}  // namespace shardrl
