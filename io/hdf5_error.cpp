#include "io/hdf5_error.hpp"

namespace shardrl {
namespace {

herr_t collect_error(unsigned /*n*/, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<Hdf5Error*>(data);
  if (e->desc != nullptr && e->desc[0] != '\0') out->innermost = e->desc;   // walked outermost first
  if (e->min_num == H5E_TRUNCATED) out->truncated = true;
  return 0;
}

}  // namespace

Hdf5Error hdf5_error() {
  Hdf5Error out;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &out);
  if (out.innermost.empty()) out.innermost = "HDF5 gave no reason";
  return out;
}

std::string hdf5_error_text() { return hdf5_error().innermost; }

}  // namespace shardrl
