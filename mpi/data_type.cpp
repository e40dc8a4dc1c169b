// Sizes and names of the element types that collectives move.
#include "mpi/communicator.hpp"

namespace shardrl {

std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::f32: return 4;
    case DataType::f64: return 8;
    case DataType::bf16: return 2;
    case DataType::i32: return 4;
    case DataType::i64: return 8;
    case DataType::u8: return 1;
  }
  return 0;
}

const char* name_of(DataType t) {
  switch (t) {
    case DataType::f32: return "f32";
    case DataType::f64: return "f64";
    case DataType::bf16: return "bf16";
    case DataType::i32: return "i32";
    case DataType::i64: return "i64";
    case DataType::u8: return "u8";
  }
  return "?";
}

}  // namespace shardrl
