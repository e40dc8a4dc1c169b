// This machine's host name, as gethostname gives it, or "unknown-host" where it gives none: one
// word, since it goes into file names and "host pid" lines that are read back.
#pragma once

#include <string>

namespace shardrl {

std::string host_name();

}  // namespace shardrl
