#include "mpi/mpi_check.hpp"

#include <cstdio>
#include <string>

#include "core/error.hpp"

namespace shardrl {
void fail_mpi(int status, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(status, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof text, "code %d", status);
  fatal(std::string(call) + " failed: " + text, file, line);
}
}  // namespace shardrl
