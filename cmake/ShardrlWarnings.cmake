# Warnings for every shardrl target: the build must stay clean under -Wall -Wextra.
add_library(shardrl_warnings INTERFACE)
target_compile_options(shardrl_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow=local -Wnon-virtual-dtor>)
