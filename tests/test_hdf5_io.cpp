// Parallel HDF5 through the io/ handles: each rank writes its slice of one global dataset
// with a collective transfer (checked to really be collective), then every rank reads it all.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <vector>

#include "io/hdf5_check.hpp"
#include "io/hdf5_handle.hpp"

namespace shardrl {
namespace {

TEST(Hdf5, CollectiveSlicesRoundTrip) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Rank 0's pid names the file for everyone (ctest may run np 1, 2, 4 at once).
  long pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  std::string path = (std::filesystem::temp_directory_path() /
          ("shardrl_h5_np" + std::to_string(size) + "_" + std::to_string(pid) + ".h5")).string();

  const long objects_before = open_hdf5_objects();
  const hsize_t per_rank = 1000, total = per_rank * size - 1;   // the last rank holds one less
  const hsize_t begin = per_rank * rank, count = std::min(per_rank, total - begin);
  std::vector<float> mine(count);
  for (hsize_t i = 0; i < count; ++i) mine[i] = float(begin + i) * 0.5f;
  {
    H5Handle fapl(SHARDRL_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
    SHARDRL_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), MPI_COMM_WORLD, MPI_INFO_NULL));
    SHARDRL_CHECK_HDF5(H5Pset_all_coll_metadata_ops(fapl.get(), true));
    SHARDRL_CHECK_HDF5(H5Pset_coll_metadata_write(fapl.get(), true));
    H5Handle file(SHARDRL_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get())));
    H5Handle space(SHARDRL_CHECK_HDF5(H5Screate_simple(1, &total, nullptr)));
    H5Handle dset(SHARDRL_CHECK_HDF5(H5Dcreate2(file.get(), "/weights", H5T_NATIVE_FLOAT, space.get(),
                                                H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    H5Handle memspace(SHARDRL_CHECK_HDF5(H5Screate_simple(1, &count, nullptr)));
    SHARDRL_CHECK_HDF5(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &begin, nullptr, &count, nullptr));
    H5Handle dxpl(SHARDRL_CHECK_HDF5(H5Pcreate(H5P_DATASET_XFER)));
    SHARDRL_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    SHARDRL_CHECK_HDF5(H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, memspace.get(), space.get(), dxpl.get(), mine.data()));
    H5D_mpio_actual_io_mode_t mode;
    SHARDRL_CHECK_HDF5(H5Pget_mpio_actual_io_mode(dxpl.get(), &mode));
    EXPECT_NE(mode, H5D_MPIO_NO_COLLECTIVE) << "the write must be collective";
  }
  EXPECT_EQ(open_hdf5_objects(), objects_before) << "every handle closed";
  {
    H5Handle fapl(SHARDRL_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
    SHARDRL_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), MPI_COMM_WORLD, MPI_INFO_NULL));
    H5Handle file(SHARDRL_CHECK_HDF5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get())));
    H5Handle dset(SHARDRL_CHECK_HDF5(H5Dopen2(file.get(), "/weights", H5P_DEFAULT)));
    H5Handle space(SHARDRL_CHECK_HDF5(H5Dget_space(dset.get())));
    hsize_t dims = 0;
    SHARDRL_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), &dims, nullptr));
    ASSERT_EQ(dims, total);
    std::vector<float> all(total);
    SHARDRL_CHECK_HDF5(H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()));
    for (hsize_t i = 0; i < total; ++i) ASSERT_EQ(all[i], float(i) * 0.5f) << i;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove(path);
}

}  // namespace
}  // namespace shardrl
