# Warnings for every shardrl target: the build must stay clean under -Wall -Wextra.
add_library(shardrl_warnings INTERFACE)
target_compile_options(shardrl_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow=local -Wnon-virtual-dtor>)
# In a unity batch each .cpp is an included file, so GCC takes a class there whose members use the
# file's anonymous namespace for a header's class (-Wsubobject-linkage); compiled alone, it is not.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(shardrl_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()
