#include "io/hdf5_handle.hpp"

#include <string>

#include "core/error.hpp"
#include "io/hdf5_check.hpp"

namespace shardrl {

void fail_hdf5(const char* call, const char* file, int line) {
  // HDF5 already printed its error stack to stderr; name the call and place.
  fatal(std::string(call) + " failed (HDF5 error stack above)", file, line);
}

void H5Handle::reset() noexcept {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    default: H5Idec_ref(id_); break;
  }
  id_ = H5I_INVALID_HID;
}

H5Handle& H5Handle::operator=(H5Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

long open_hdf5_objects() { return static_cast<long>(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL)); }

}  // namespace shardrl
