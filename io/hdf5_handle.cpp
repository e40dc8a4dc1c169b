#include "io/hdf5_handle.hpp"

#include <string>

#include "core/error.hpp"
#include "io/hdf5_check.hpp"

namespace shardrl {

void fail_hdf5(const char* call, const char* file, int line) {
  // HDF5 already printed its error stack to stderr; name the call and place.
  fatal(std::string(call) + " failed (HDF5 error stack above)", file, line);
}

herr_t H5Handle::close() noexcept {
  if (id_ < 0) return 0;
  herr_t status = 0;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: status = H5Fclose(id_); break;
    case H5I_GROUP: status = H5Gclose(id_); break;
    case H5I_DATASET: status = H5Dclose(id_); break;
    case H5I_DATASPACE: status = H5Sclose(id_); break;
    case H5I_GENPROP_LST: status = H5Pclose(id_); break;
    case H5I_ATTR: status = H5Aclose(id_); break;
    case H5I_DATATYPE: status = H5Tclose(id_); break;
    default: status = H5Idec_ref(id_) < 0 ? -1 : 0; break;
  }
  id_ = H5I_INVALID_HID;
  return status;
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
