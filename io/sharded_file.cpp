#include "io/sharded_file.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"

// x86-64 host code gets a PCLMULQDQ crc32 (chosen at run time); other hosts and nvcc use zlib's.
#if defined(__x86_64__) && !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define SHARDRL_CRC32_PCLMUL 1
#include <immintrin.h>
#else
#define SHARDRL_CRC32_PCLMUL 0
#endif

// The crc32 is of the tensor's bytes as stored (IEEE F32LE): the host's floats, on the
// little-endian hosts shardrl runs on.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "crc32 of float slices assumes a little-endian host");
static_assert(sizeof(z_off_t) >= 8, "crc32_combine needs 64-bit lengths");

namespace shardrl {
namespace {

constexpr const char* kCrcAttribute = "crc32";

// One collective transfer moves at most this many elements per rank (MPI counts are ints, and
// it bounds what MPI-IO stages at once); every rank makes the same number of transfers.
constexpr std::uint64_t kMaxTransferElements = std::uint64_t(1) << 28;   // 1 GiB of float32

// Slices of at least this many elements get their crc32 computed on a helper thread, overlapping
// the write.
constexpr std::uint64_t kThreadedCrcElements = std::uint64_t(1) << 18;   // 1 MiB

// verify_all reads each rank's share of a tensor in pieces of at most this many elements.
constexpr std::uint64_t kVerifyChunkElements = std::uint64_t(1) << 24;   // 64 MiB of float32

// Datasets of at least kAlignThreshold bytes start at a multiple of kAlignment in the file (as
// parallel file systems' stripes do); small ones (norms, scalars) are packed. Costs 0.55% of a
// llama-1b checkpoint's size.
constexpr hsize_t kAlignThreshold = hsize_t(1) << 20;
constexpr hsize_t kAlignment = hsize_t(1) << 20;

float g_empty_buffer[1];   // a valid pointer for transfers of no elements

// ---------------------------------------------------------------------------------------------
// HDF5 errors

// Silences HDF5's automatic error-stack printing while alive: failures on user files become
// InputErrors carrying the relevant line of the stack, internal failures name it in their fatal
// message.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

struct Hdf5Error {
  std::string innermost;   // the most specific description on the stack
  bool truncated = false;  // some entry says the file is truncated
};

herr_t collect_error(unsigned /*n*/, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<Hdf5Error*>(data);
  if (e->desc != nullptr && e->desc[0] != '\0') out->innermost = e->desc;   // walked outermost first
  if (e->min_num == H5E_TRUNCATED) out->truncated = true;
  return 0;
}

// What the current HDF5 error stack says. Call right after the failing call.
Hdf5Error hdf5_error() {
  Hdf5Error out;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &out);
  if (out.innermost.empty()) out.innermost = "HDF5 gave no reason";
  return out;
}

std::string hdf5_error_text() { return hdf5_error().innermost; }

// Internal HDF5 calls (property lists, dataspaces) fail only on a bug or an unusable machine.
template <class T>
T require_hdf5(T result, const char* call, const char* file, int line) {
  if (result < 0) fatal(std::string(call) + " failed: " + hdf5_error_text(), file, line);
  return result;
}
#define SHARDRL_H5_REQUIRE(call) require_hdf5((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------------------------------------
// Agreeing before throwing (DESIGN.md invariant 6)

// If any rank has a non-empty `error`, every rank throws InputError with the message of the
// lowest such rank.
void agree(MPI_Comm comm, int rank, const std::string& error) {
  int mine = error.empty() ? INT_MAX : rank;
  int first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  std::string message = rank == first ? error : std::string();
  unsigned long long n = message.size();
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, first, comm);
  message.resize(n);
  MPI_Bcast(message.data(), static_cast<int>(n), MPI_CHAR, first, comm);
  throw InputError(message);
}

// ---------------------------------------------------------------------------------------------
// Names, shapes, ranges

// "/a/b" for "a/b" or "/a/b". Components are non-empty (no "//", no trailing '/').
std::string absolute_name(const std::string& name) {
  std::string abs = !name.empty() && name[0] == '/' ? name : "/" + name;
  SHARDRL_CHECK(abs.size() > 1 && abs.back() != '/' && abs.find("//") == std::string::npos,
                "an HDF5 dataset name has non-empty '/'-separated parts: '" + name + "'");
  return abs;
}

std::uint64_t numel(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  return fmt::format("({})", fmt::join(shape, ", "));
}

std::uint64_t rounds_for(std::uint64_t count) {
  return (count + kMaxTransferElements - 1) / kMaxTransferElements;
}

// Rank r's share of n elements split evenly over `parts` ranks.
std::uint64_t share_begin(std::uint64_t n, int parts, int r) {
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(n) * static_cast<unsigned>(r)) /
                                    static_cast<unsigned>(parts));
}

struct Block {
  std::vector<hsize_t> start, count;
};

// Appends hyperslab blocks whose union is elements [begin, end) (end > begin) of the row-major
// sub-tensor at `prefix` (its first dims.size() - prefix.size() dimensions remain). A flat range
// of a 2-d tensor is at most a partial first row, a block of full rows and a partial last row;
// in N-d the partial rows recurse into the inner dimensions (at most 2 (N-1) + 1 blocks).
void flat_range_blocks(const std::vector<hsize_t>& dims, std::vector<hsize_t>& prefix, std::uint64_t begin,
                       std::uint64_t end, std::vector<Block>& out) {
  const std::size_t d = prefix.size();
  const std::size_t n = dims.size();
  auto block = [&](hsize_t first, hsize_t rows) {
    Block b;
    b.start = prefix;
    b.count.assign(d, 1);
    b.start.push_back(first);
    b.count.push_back(rows);
    for (std::size_t k = d + 1; k < n; ++k) {
      b.start.push_back(0);
      b.count.push_back(dims[k]);
    }
    out.push_back(std::move(b));
  };
  if (d + 1 == n) {
    block(begin, end - begin);
    return;
  }
  std::uint64_t inner = 1;
  for (std::size_t k = d + 1; k < n; ++k) inner *= dims[k];
  std::uint64_t first_row = begin / inner;
  const std::uint64_t last_row = end / inner;   // the row holding `end` (exclusive)
  const std::uint64_t head = begin % inner, tail = end % inner;
  auto recurse = [&](std::uint64_t row, std::uint64_t b, std::uint64_t e) {
    prefix.push_back(row);
    flat_range_blocks(dims, prefix, b, e, out);
    prefix.pop_back();
  };
  if (first_row == last_row) {   // inside one row
    recurse(first_row, head, tail);
    return;
  }
  if (head != 0) recurse(first_row++, head, inner);
  if (last_row > first_row) block(first_row, last_row - first_row);
  if (tail != 0) recurse(last_row, 0, tail);
}

// Selects elements [begin, end) of the row-major flattening of `space`'s extent `dims`.
void select_flat_range(hid_t space, const std::vector<hsize_t>& dims, std::uint64_t begin, std::uint64_t end) {
  if (begin == end) {
    SHARDRL_H5_REQUIRE(H5Sselect_none(space));
    return;
  }
  if (dims.empty()) {   // 0-d: the one element
    SHARDRL_H5_REQUIRE(H5Sselect_all(space));
    return;
  }
  std::vector<Block> blocks;
  std::vector<hsize_t> prefix;
  flat_range_blocks(dims, prefix, begin, end, blocks);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    SHARDRL_H5_REQUIRE(H5Sselect_hyperslab(space, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, blocks[i].start.data(),
                                           nullptr, blocks[i].count.data(), nullptr));
}

H5Handle make_space(const std::vector<hsize_t>& dims) {
  if (dims.empty()) return H5Handle(SHARDRL_H5_REQUIRE(H5Screate(H5S_SCALAR)));
  return H5Handle(SHARDRL_H5_REQUIRE(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

std::vector<hsize_t> space_dims(hid_t space) {
  const int ndims = SHARDRL_H5_REQUIRE(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(ndims));
  if (ndims > 0) SHARDRL_H5_REQUIRE(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return dims;
}

// One collective transfer of elements [begin, begin + count) (count may be 0) of the flattened
// dataset between `data` and the file. Returns HDF5's reason on failure, "" on success.
std::string transfer(bool write, hid_t dset, hid_t dxpl, const std::vector<hsize_t>& dims, std::uint64_t begin,
                     std::uint64_t count, float* data) {
  H5Handle file_space(SHARDRL_H5_REQUIRE(H5Dget_space(dset)));
  select_flat_range(file_space.get(), dims, begin, begin + count);
  // A wrong selection would make HDF5 fail on this rank alone, before the collective transfer
  // that the other ranks wait in: stop the job instead.
  SHARDRL_CHECK(H5Sget_select_npoints(file_space.get()) == static_cast<hssize_t>(count),
                fmt::format("the selection of elements [{}, {}) holds {} elements", begin, begin + count,
                            H5Sget_select_npoints(file_space.get())));
  const hsize_t mem_count = std::max<hsize_t>(count, 1);
  H5Handle mem_space(SHARDRL_H5_REQUIRE(H5Screate_simple(1, &mem_count, nullptr)));
  if (count == 0) SHARDRL_H5_REQUIRE(H5Sselect_none(mem_space.get()));
  float* buf = count == 0 ? g_empty_buffer : data;
  const herr_t rc = write ? H5Dwrite(dset, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), dxpl, buf)
                          : H5Dread(dset, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), dxpl, buf);
  return rc < 0 ? hdf5_error_text() : std::string();
}

// ---------------------------------------------------------------------------------------------
// Checksums

#if SHARDRL_CRC32_PCLMUL
// zlib's crc32 (CRC-32, reflected polynomial 0xEDB88320) by carry-less multiplication folding,
// after Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" as in Chromium's
// zlib (crc32_simd.c): 15 GB/s where zlib 1.2.13 computes 6.7 GB/s on one core. `crc` is the
// pre-inverted running value; len >= 64 and a multiple of 16.
#define SHARDRL_PCLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

SHARDRL_PCLMUL_TARGET inline __m128i load(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// x.lo * k.lo ^ x.hi * k.hi (carry-less products)
SHARDRL_PCLMUL_TARGET inline __m128i fold(__m128i x, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

SHARDRL_PCLMUL_TARGET std::uint32_t crc32_fold_pclmul(const unsigned char* buf, std::size_t len, std::uint32_t crc) {
  alignas(16) static const std::uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static const std::uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static const std::uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
  alignas(16) static const std::uint64_t poly[] = {0x01db710641, 0x01f7011641};
  __m128i x1 = _mm_xor_si128(load(buf), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x2 = load(buf + 16), x3 = load(buf + 32), x4 = load(buf + 48);
  __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
  buf += 64;
  len -= 64;
  for (; len >= 64; buf += 64, len -= 64) {   // four lanes of 16 bytes
    x1 = _mm_xor_si128(fold(x1, k), load(buf));
    x2 = _mm_xor_si128(fold(x2, k), load(buf + 16));
    x3 = _mm_xor_si128(fold(x3, k), load(buf + 32));
    x4 = _mm_xor_si128(fold(x4, k), load(buf + 48));
  }
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));   // the four lanes into one
  x1 = _mm_xor_si128(fold(x1, k), x2);
  x1 = _mm_xor_si128(fold(x1, k), x3);
  x1 = _mm_xor_si128(fold(x1, k), x4);
  for (; len >= 16; buf += 16, len -= 16) x1 = _mm_xor_si128(fold(x1, k), load(buf));
  // 128 -> 64 bits
  const __m128i mask = _mm_setr_epi32(~0, 0, ~0, 0);
  x2 = _mm_clmulepi64_si128(x1, k, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
  k = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask), k, 0x00), x2);
  // Barrett reduction to 32 bits
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask), k, 0x10);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, mask), k, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, x2), 1));
}

bool cpu_has_pclmul() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}
#endif

// zlib's crc32(crc, bytes) (the same value), faster where the CPU allows.
std::uint32_t crc32_bytes(std::uint32_t crc, const unsigned char* buf, std::size_t len) {
#if SHARDRL_CRC32_PCLMUL
  if (len >= 64 && cpu_has_pclmul()) {
    const std::size_t folded = len & ~std::size_t(15);
    crc = ~crc32_fold_pclmul(buf, folded, ~crc);
    buf += folded;
    len -= folded;
  }
#endif
  return static_cast<std::uint32_t>(crc32_z(crc, buf, static_cast<z_size_t>(len)));
}

std::uint32_t crc_of(const float* data, std::uint64_t count, std::uint32_t crc = 0) {
  return crc32_bytes(crc, reinterpret_cast<const unsigned char*>(data), count * sizeof(float));
}

// One rank's slice of a tensor, as every rank learns it.
struct Slice {
  std::uint64_t key = 0;     // hash of the tensor's name and shape (all ranks must agree)
  std::uint64_t begin = 0;
  std::uint64_t count = 0;
  std::uint64_t crc = 0;     // crc32 of the slice's bytes
};
static_assert(sizeof(Slice) == 4 * sizeof(std::uint64_t), "Slice travels as 4 uint64");

std::vector<Slice> gather_slices(MPI_Comm comm, int size, const Slice& mine) {
  std::vector<Slice> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, 4, MPI_UINT64_T, all.data(), 4, MPI_UINT64_T, comm);
  return all;
}

// crc32 of the whole tensor from its slices, combined in the order of their ranges (rank order
// when the ranks hold consecutive ranges). The slices must be disjoint and cover [0, total).
std::uint32_t combine_slices(std::vector<Slice> slices, std::uint64_t total, const std::string& tensor) {
  std::sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.count < b.count;
  });
  uLong crc = crc32(0L, Z_NULL, 0);
  std::uint64_t covered = 0;
  for (const Slice& s : slices) {
    if (s.count == 0) continue;
    SHARDRL_CHECK(s.begin == covered,
                  fmt::format("the ranks' ranges of tensor {} are disjoint and cover it: a range starts at {}, "
                              "expected {}", tensor, s.begin, covered));
    crc = crc32_combine(crc, static_cast<uLong>(s.crc), static_cast<z_off_t>(s.count * sizeof(float)));
    covered += s.count;
  }
  SHARDRL_CHECK(covered == total, fmt::format("the ranks' ranges of tensor {} cover {} of its {} elements", tensor,
                                              covered, total));
  return static_cast<std::uint32_t>(crc);
}

std::uint64_t tensor_key(const std::string& name, const std::vector<std::uint64_t>& shape) {
  std::uint64_t h = 1469598103934665603ull;   // FNV-1a
  auto mix = [&h](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  mix(name.data(), name.size());
  const std::uint64_t rank = shape.size();
  mix(&rank, sizeof rank);
  for (auto d : shape) mix(&d, sizeof d);
  return h;
}

// ---------------------------------------------------------------------------------------------
// Files

H5Handle make_fapl(MPI_Comm comm, bool writing) {
  H5Handle fapl(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_FILE_ACCESS)));
  SHARDRL_H5_REQUIRE(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  SHARDRL_H5_REQUIRE(H5Pset_all_coll_metadata_ops(fapl.get(), true));
  SHARDRL_H5_REQUIRE(H5Pset_coll_metadata_write(fapl.get(), true));
  if (writing) SHARDRL_H5_REQUIRE(H5Pset_alignment(fapl.get(), kAlignThreshold, kAlignment));
  return fapl;
}

H5Handle make_collective_dxpl() {
  H5Handle dxpl(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_DATASET_XFER)));
  SHARDRL_H5_REQUIRE(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

// fsync of a closed file. Returns the reason on failure, "" on success.
std::string fsync_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  std::string error;
  if (::fsync(fd) != 0) error = std::strerror(errno);
  ::close(fd);
  return error;
}

// Why `path` cannot be a checkpoint before HDF5 looks at it ("" when it may be one). Rank 0 only.
std::string precheck(const std::filesystem::path& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return "no such file";
  if (std::filesystem::is_directory(st)) return "a directory";
  if (!std::filesystem::is_regular_file(st)) return "not a regular file";
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return "an empty file";
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_hdf5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
#endif
  if (is_hdf5 < 0) return "cannot read it: " + hdf5_error_text();
  if (is_hdf5 == 0) return "not an HDF5 file";
  return {};
}

// The dataset `abs_name`, or an invalid handle when there is none (no such link, or not a
// dataset). Returns HDF5's reason in `error` if the file cannot be read.
H5Handle open_dataset_if_any(hid_t file, const std::string& abs_name, std::string& error) {
  // H5Lexists fails (rather than saying no) when an intermediate group is missing: walk the path.
  for (std::size_t slash = abs_name.find('/', 1);; slash = abs_name.find('/', slash + 1)) {
    const std::string prefix = abs_name.substr(0, slash);
    const htri_t exists = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    if (exists < 0) {
      error = hdf5_error_text();
      return {};
    }
    if (exists == 0) return {};
    if (slash == std::string::npos) break;
  }
  const hid_t obj = H5Oopen(file, abs_name.c_str(), H5P_DEFAULT);
  if (obj < 0) {
    error = hdf5_error_text();
    return {};
  }
  H5Handle handle(obj);
  if (H5Iget_type(obj) != H5I_DATASET) return {};
  return handle;
}

std::string describe_type(hid_t type) {
  const std::size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return fmt::format("{}{}", H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", bits);
    case H5T_FLOAT: return fmt::format("float{}", bits);
    case H5T_STRING: return "string";
    default: return "another HDF5 type";
  }
}

bool is_float32(hid_t dset) {
  H5Handle type(SHARDRL_H5_REQUIRE(H5Dget_type(dset)));
  return H5Tget_class(type.get()) == H5T_FLOAT && H5Tget_size(type.get()) == 4;
}

// 1 with the value, 0 when the attribute is absent, -1 with the reason in `error`.
int read_crc_attribute(hid_t dset, std::uint32_t& value, std::string& error) {
  const htri_t exists = H5Aexists(dset, kCrcAttribute);
  if (exists < 0) {
    error = hdf5_error_text();
    return -1;
  }
  if (exists == 0) return 0;
  const hid_t attr = H5Aopen(dset, kCrcAttribute, H5P_DEFAULT);
  if (attr < 0) {
    error = hdf5_error_text();
    return -1;
  }
  H5Handle handle(attr);
  if (H5Aread(attr, H5T_NATIVE_UINT32, &value) < 0) {
    error = hdf5_error_text();
    return -1;
  }
  return 1;
}

}  // namespace

// =============================================================================================
// Writer

ShardedFileWriter::ShardedFileWriter(const std::filesystem::path& path, MPI_Comm comm) : path_(path), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  QuietHdf5 quiet;
  H5Handle fapl = make_fapl(comm_, true);
  std::string error;
  const hid_t file = H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (file < 0)
    error = fmt::format("{}: cannot create ({})", path_.string(), hdf5_error_text());
  else
    file_ = H5Handle(file);
  agree(comm_, rank_, error);

  dxpl_ = make_collective_dxpl();
  lcpl_ = H5Handle(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_LINK_CREATE)));
  SHARDRL_H5_REQUIRE(H5Pset_create_intermediate_group(lcpl_.get(), 1));
  dcpl_ = H5Handle(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_DATASET_CREATE)));
  SHARDRL_H5_REQUIRE(H5Pset_layout(dcpl_.get(), H5D_CONTIGUOUS));
  SHARDRL_H5_REQUIRE(H5Pset_alloc_time(dcpl_.get(), H5D_ALLOC_TIME_EARLY));   // parallel HDF5 requires it
  SHARDRL_H5_REQUIRE(H5Pset_fill_time(dcpl_.get(), H5D_FILL_TIME_NEVER));     // every element is written
}

ShardedFileWriter::~ShardedFileWriter() {
  QuietHdf5 quiet;
  file_.reset();
}

void ShardedFileWriter::create_dataset(const std::string& name, hid_t file_type, hid_t space, H5Handle& dset,
                                       std::string& error) {
  const hid_t id = H5Dcreate2(file_.get(), name.c_str(), file_type, space, lcpl_.get(), dcpl_.get(), H5P_DEFAULT);
  if (id < 0)
    error = fmt::format("{}: cannot create dataset {} ({})", path_.string(), name, hdf5_error_text());
  else
    dset = H5Handle(id);
}

void ShardedFileWriter::write(const std::string& name, const std::vector<std::uint64_t>& shape, std::uint64_t begin,
                              std::uint64_t count, const float* data) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write after close() of " + path_.string());
  const std::string dname = absolute_name(name);
  const std::uint64_t total = numel(shape);
  SHARDRL_CHECK(begin <= total && count <= total - begin,
                fmt::format("range [{}, {}) inside tensor {} of {} elements", begin, begin + count, dname, total));
  SHARDRL_CHECK(count == 0 || data != nullptr, "data for tensor " + dname);
  QuietHdf5 quiet;

  // This slice's crc32 is computed on a helper thread while the slice is written rather than
  // before it (bench_checkpoint_io, llama-1b at np 2: save / plain write() went from ~0.7 to ~1.0).
  // The joiner waits for it on every way out, exceptions included.
  std::uint32_t my_crc = 0;
  std::thread crc_thread;
  struct Joiner {
    std::thread& thread;
    ~Joiner() {
      if (thread.joinable()) thread.join();
    }
  } joiner{crc_thread};
  if (count >= kThreadedCrcElements)
    crc_thread = std::thread([&my_crc, data, count] { my_crc = crc_of(data, count); });
  else
    my_crc = crc_of(data, count);

  // Every rank learns every slice before any HDF5 call, so that misuse (different tensors, ranges
  // that overlap or leave holes) stops every rank alike.
  const Slice mine{tensor_key(dname, shape), begin, count, 0};
  std::vector<Slice> slices = gather_slices(comm_, size_, mine);
  std::uint64_t rounds = 0;
  for (const Slice& s : slices) {
    SHARDRL_CHECK(s.key == mine.key, "every rank writes the same tensor (name and shape) at the same time: " +
                                         dname + " " + shape_string(shape) + " on rank " + std::to_string(rank_));
    rounds = std::max(rounds, rounds_for(s.count));
  }
  combine_slices(slices, total, dname);   // checks the ranges

  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Handle space = make_space(dims);
  H5Handle dset;
  std::string error;
  create_dataset(dname, H5T_IEEE_F32LE, space.get(), dset, error);
  agree(comm_, rank_, error);

  for (std::uint64_t r = 0; r < rounds; ++r) {
    const std::uint64_t off = std::min(count, r * kMaxTransferElements);
    const std::uint64_t n = std::min(count - off, kMaxTransferElements);
    const std::string why =
        transfer(true, dset.get(), dxpl_.get(), dims, begin + off, n, const_cast<float*>(data) + (n ? off : 0));
    agree(comm_, rank_,
          why.empty() ? why : fmt::format("{}: cannot write tensor {} ({})", path_.string(), dname, why));
  }

  // The whole tensor's crc32 from every rank's slice crc, combined in the order of the ranges.
  if (crc_thread.joinable()) crc_thread.join();
  std::vector<std::uint64_t> crcs(static_cast<std::size_t>(size_));
  const std::uint64_t my_crc64 = my_crc;
  MPI_Allgather(&my_crc64, 1, MPI_UINT64_T, crcs.data(), 1, MPI_UINT64_T, comm_);
  for (std::size_t i = 0; i < slices.size(); ++i) slices[i].crc = crcs[i];
  const std::uint32_t crc = combine_slices(slices, total, dname);

  H5Handle attr_space(SHARDRL_H5_REQUIRE(H5Screate(H5S_SCALAR)));
  const hid_t attr = H5Acreate2(dset.get(), kCrcAttribute, H5T_STD_U32LE, attr_space.get(), H5P_DEFAULT, H5P_DEFAULT);
  if (attr < 0) {
    error = hdf5_error_text();
  } else {
    H5Handle attr_handle(attr);
    if (H5Awrite(attr, H5T_NATIVE_UINT32, &crc) < 0) error = hdf5_error_text();
  }
  agree(comm_, rank_,
        error.empty() ? error
                      : fmt::format("{}: cannot write the checksum of tensor {} ({})", path_.string(), dname, error));
}

namespace {
// Creates a small dataset and writes rank 0's `data` with a collective transfer (the other ranks
// select nothing).
void write_small(const std::filesystem::path& path, MPI_Comm comm, int rank, hid_t file, hid_t lcpl, hid_t dxpl,
                 const std::string& name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims,
                 const void* data) {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  H5Handle space = make_space(dims);
  H5Handle dcpl(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_DATASET_CREATE)));
  SHARDRL_H5_REQUIRE(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));
  SHARDRL_H5_REQUIRE(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  std::string error;
  const hid_t id = H5Dcreate2(file, dname.c_str(), file_type, space.get(), lcpl, dcpl.get(), H5P_DEFAULT);
  if (id < 0) error = fmt::format("{}: cannot create dataset {} ({})", path.string(), dname, hdf5_error_text());
  H5Handle dset(id < 0 ? H5I_INVALID_HID : id);
  agree(comm, rank, error);

  std::uint64_t elements = 1;
  for (auto d : dims) elements *= d;
  if (elements == 0) return;   // nothing to write (a dataset without elements has no storage)
  H5Handle file_space(SHARDRL_H5_REQUIRE(H5Scopy(space.get())));
  H5Handle mem_space(SHARDRL_H5_REQUIRE(H5Scopy(space.get())));
  if (rank != 0) {
    SHARDRL_H5_REQUIRE(H5Sselect_none(file_space.get()));
    SHARDRL_H5_REQUIRE(H5Sselect_none(mem_space.get()));
  }
  if (H5Dwrite(dset.get(), mem_type, mem_space.get(), file_space.get(), dxpl, data) < 0)
    error = fmt::format("{}: cannot write {} ({})", path.string(), dname, hdf5_error_text());
  agree(comm, rank, error);
}
}  // namespace

void ShardedFileWriter::write_string(const std::string& name, const std::string& value) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write_string after close() of " + path_.string());
  H5Handle type(SHARDRL_H5_REQUIRE(H5Tcopy(H5T_C_S1)));
  SHARDRL_H5_REQUIRE(H5Tset_size(type.get(), value.size() + 1));   // with its terminating null
  SHARDRL_H5_REQUIRE(H5Tset_strpad(type.get(), H5T_STR_NULLTERM));
  SHARDRL_H5_REQUIRE(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  write_small(path_, comm_, rank_, file_.get(), lcpl_.get(), dxpl_.get(), name, type.get(), type.get(), {},
              value.c_str());
}

void ShardedFileWriter::write_int64(const std::string& name, std::int64_t value) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write_int64 after close() of " + path_.string());
  write_small(path_, comm_, rank_, file_.get(), lcpl_.get(), dxpl_.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, {},
              &value);
}

void ShardedFileWriter::write_int64s(const std::string& name, const std::vector<std::int64_t>& values) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write_int64s after close() of " + path_.string());
  const std::int64_t none = 0;
  write_small(path_, comm_, rank_, file_.get(), lcpl_.get(), dxpl_.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64,
              {values.size()}, values.empty() ? &none : values.data());
}

void ShardedFileWriter::write_double(const std::string& name, double value) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write_double after close() of " + path_.string());
  write_small(path_, comm_, rank_, file_.get(), lcpl_.get(), dxpl_.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
              {}, &value);
}

void ShardedFileWriter::close() {
  if (file_.get() < 0) return;
  QuietHdf5 quiet;
  std::string error;
  // With the MPI-IO driver a global flush ends in MPI_File_sync on every rank.
  if (H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0) error = hdf5_error_text();
  file_.reset();   // collective H5Fclose, whatever the flush said
  if (rank_ == 0 && error.empty()) error = fsync_file(path_);
  agree(comm_, rank_,
        error.empty() ? error : fmt::format("{}: cannot write the file to disk ({})", path_.string(), error));
}

// =============================================================================================
// Reader

ShardedFileReader::ShardedFileReader(const std::filesystem::path& path, MPI_Comm comm) : path_(path), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  QuietHdf5 quiet;
  const std::string prefix = path_.string() + ": cannot open as a shardrl checkpoint (";
  std::string why;
  if (rank_ == 0) why = precheck(path_);
  agree(comm_, rank_, why.empty() ? why : prefix + why + ")");

  H5Handle fapl = make_fapl(comm_, false);
  const hid_t file = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (file < 0) {
    const Hdf5Error e = hdf5_error();
    if (e.truncated) {
      std::error_code ec;
      why = fmt::format("truncated: {} bytes, fewer than its HDF5 superblock records",
                        std::filesystem::file_size(path_, ec));
    } else {
      why = e.innermost;
    }
  } else {
    file_ = H5Handle(file);
  }
  agree(comm_, rank_, why.empty() ? why : prefix + why + ")");
  dxpl_ = make_collective_dxpl();
}

bool ShardedFileReader::has(const std::string& name) const {
  QuietHdf5 quiet;
  std::string error;
  H5Handle dset = open_dataset_if_any(file_.get(), absolute_name(name), error);
  agree(comm_, rank_, error.empty() ? error : fmt::format("{}: cannot read ({})", path_.string(), error));
  return dset.get() >= 0;
}

std::vector<std::uint64_t> ShardedFileReader::shape(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  H5Handle dset = open_dataset_if_any(file_.get(), dname, error);
  if (!error.empty())
    error = fmt::format("{}: cannot read ({})", path_.string(), error);
  else if (dset.get() < 0)
    error = fmt::format("{}: no tensor {}", path_.string(), dname);
  agree(comm_, rank_, error);
  H5Handle space(SHARDRL_H5_REQUIRE(H5Dget_space(dset.get())));
  const std::vector<hsize_t> dims = space_dims(space.get());
  return {dims.begin(), dims.end()};
}

void ShardedFileReader::read(const std::string& name, const std::vector<std::uint64_t>& expected_shape,
                             std::uint64_t begin, std::uint64_t count, float* data, bool verify) {
  const std::string dname = absolute_name(name);
  const std::uint64_t total = numel(expected_shape);
  SHARDRL_CHECK(begin <= total && count <= total - begin,
                fmt::format("range [{}, {}) inside tensor {} of {} elements", begin, begin + count, dname, total));
  SHARDRL_CHECK(count == 0 || data != nullptr, "a buffer for tensor " + dname);
  QuietHdf5 quiet;

  std::string error;
  H5Handle dset = open_dataset_if_any(file_.get(), dname, error);
  if (!error.empty()) {
    error = fmt::format("{}: cannot read ({})", path_.string(), error);
  } else if (dset.get() < 0) {
    error = fmt::format("{}: no tensor {}", path_.string(), dname);
  } else {
    H5Handle type(SHARDRL_H5_REQUIRE(H5Dget_type(dset.get())));
    H5Handle space(SHARDRL_H5_REQUIRE(H5Dget_space(dset.get())));
    const std::vector<hsize_t> dims = space_dims(space.get());
    const std::vector<std::uint64_t> stored(dims.begin(), dims.end());
    if (!is_float32(dset.get()))
      error = fmt::format("{}: tensor {}: stored as {}, expected float32", path_.string(), dname,
                          describe_type(type.get()));
    else if (stored != expected_shape)
      error = fmt::format("{}: tensor {}: shape {} in the file, expected {}", path_.string(), dname,
                          shape_string(stored), shape_string(expected_shape));
  }
  agree(comm_, rank_, error);

  std::uint64_t my_rounds = rounds_for(count), rounds = 0;
  MPI_Allreduce(&my_rounds, &rounds, 1, MPI_UINT64_T, MPI_MAX, comm_);
  const std::vector<hsize_t> dims(expected_shape.begin(), expected_shape.end());
  for (std::uint64_t r = 0; r < rounds; ++r) {
    const std::uint64_t off = std::min(count, r * kMaxTransferElements);
    const std::uint64_t n = std::min(count - off, kMaxTransferElements);
    const std::string why = transfer(false, dset.get(), dxpl_.get(), dims, begin + off, n, data + (n ? off : 0));
    agree(comm_, rank_,
          why.empty() ? why : fmt::format("{}: tensor {}: cannot read ({})", path_.string(), dname, why));
  }
  if (!verify) return;

  const std::vector<Slice> slices = gather_slices(comm_, size_, Slice{0, begin, count, crc_of(data, count)});
  const std::uint32_t computed = combine_slices(slices, total, dname);
  std::uint32_t stored = 0;
  const int found = read_crc_attribute(dset.get(), stored, error);
  if (found < 0)
    error = fmt::format("{}: tensor {}: cannot read its checksum ({})", path_.string(), dname, error);
  else if (found == 0 || stored != computed)
    error = fmt::format("{}: tensor {}: checksum mismatch (stored {}, computed 0x{:08x})", path_.string(), dname,
                        found == 0 ? std::string("none") : fmt::format("0x{:08x}", stored), computed);
  agree(comm_, rank_, error);
}

namespace {
// A small dataset of `klass` with `elements` elements (-1: any number, 1-d or scalar), or an
// error naming the file and the dataset.
H5Handle open_small(hid_t file, const std::filesystem::path& path, const std::string& dname, H5T_class_t klass,
                    const char* kind, long elements, std::string& error, std::uint64_t& n) {
  H5Handle dset = open_dataset_if_any(file, dname, error);
  if (!error.empty()) {
    error = fmt::format("{}: cannot read ({})", path.string(), error);
    return {};
  }
  if (dset.get() < 0) {
    error = fmt::format("{}: no dataset {}", path.string(), dname);
    return {};
  }
  H5Handle type(SHARDRL_H5_REQUIRE(H5Dget_type(dset.get())));
  H5Handle space(SHARDRL_H5_REQUIRE(H5Dget_space(dset.get())));
  const std::vector<hsize_t> dims = space_dims(space.get());
  n = 1;
  for (auto d : dims) n *= d;
  const bool shape_ok = elements < 0 ? dims.size() <= 1 : n == static_cast<std::uint64_t>(elements);
  if (H5Tget_class(type.get()) != klass || !shape_ok) {
    std::vector<std::uint64_t> shape(dims.begin(), dims.end());
    error = fmt::format("{}: {}: expected {}, found {} of shape {}", path.string(), dname, kind,
                        describe_type(type.get()), shape_string(shape));
    return {};
  }
  return dset;
}
}  // namespace

std::string ShardedFileReader::read_string(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  std::uint64_t n = 0;
  H5Handle dset = open_small(file_.get(), path_, dname, H5T_STRING, "a string", 1, error, n);
  agree(comm_, rank_, error);
  H5Handle type(SHARDRL_H5_REQUIRE(H5Dget_type(dset.get())));
  std::string value;
  const int is_variable = SHARDRL_H5_REQUIRE(H5Tis_variable_str(type.get()));
  if (is_variable > 0) {
    H5Handle mem_type(SHARDRL_H5_REQUIRE(H5Tcopy(H5T_C_S1)));
    SHARDRL_H5_REQUIRE(H5Tset_size(mem_type.get(), H5T_VARIABLE));
    char* text = nullptr;
    if (H5Dread(dset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) < 0) {
      error = hdf5_error_text();
    } else if (text != nullptr) {
      value = text;
      H5free_memory(text);
    }
  } else {
    H5Handle mem_type(SHARDRL_H5_REQUIRE(H5Tcopy(type.get())));
    std::string buf(H5Tget_size(type.get()), '\0');
    if (H5Dread(dset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
      error = hdf5_error_text();
    else
      value = buf.substr(0, buf.find('\0'));
  }
  agree(comm_, rank_, error.empty() ? error : fmt::format("{}: cannot read {} ({})", path_.string(), dname, error));
  return value;
}

std::int64_t ShardedFileReader::read_int64(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  std::uint64_t n = 0;
  H5Handle dset = open_small(file_.get(), path_, dname, H5T_INTEGER, "an int64", 1, error, n);
  agree(comm_, rank_, error);
  std::int64_t value = 0;
  if (H5Dread(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0)
    error = fmt::format("{}: cannot read {} ({})", path_.string(), dname, hdf5_error_text());
  agree(comm_, rank_, error);
  return value;
}

std::vector<std::int64_t> ShardedFileReader::read_int64s(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  std::uint64_t n = 0;
  H5Handle dset = open_small(file_.get(), path_, dname, H5T_INTEGER, "int64s", -1, error, n);
  agree(comm_, rank_, error);
  std::vector<std::int64_t> values(n);
  if (n > 0 && H5Dread(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    error = fmt::format("{}: cannot read {} ({})", path_.string(), dname, hdf5_error_text());
  agree(comm_, rank_, error);
  return values;
}

double ShardedFileReader::read_double(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  std::uint64_t n = 0;
  H5Handle dset = open_small(file_.get(), path_, dname, H5T_FLOAT, "a double", 1, error, n);
  agree(comm_, rank_, error);
  double value = 0;
  if (H5Dread(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0)
    error = fmt::format("{}: cannot read {} ({})", path_.string(), dname, hdf5_error_text());
  agree(comm_, rank_, error);
  return value;
}

namespace {
// Appends the datasets under `group` (named `prefix`) to `out`. Returns HDF5's reason on failure.
std::string list_datasets(hid_t group, const std::string& prefix, std::vector<std::string>& out) {
  H5G_info_t info;
  if (H5Gget_info(group, &info) < 0) return hdf5_error_text();
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) return hdf5_error_text();
    std::string link(static_cast<std::size_t>(len) + 1, '\0');
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, link.data(), link.size(), H5P_DEFAULT) < 0)
      return hdf5_error_text();
    link.resize(static_cast<std::size_t>(len));
    H5L_info_t link_info;
    if (H5Lget_info(group, link.c_str(), &link_info, H5P_DEFAULT) < 0) return hdf5_error_text();
    if (link_info.type != H5L_TYPE_HARD) continue;
    const hid_t obj = H5Oopen(group, link.c_str(), H5P_DEFAULT);
    if (obj < 0) return hdf5_error_text();
    H5Handle handle(obj);
    const std::string path = prefix + "/" + link;
    const H5I_type_t type = H5Iget_type(obj);
    if (type == H5I_DATASET) {
      out.push_back(path);
    } else if (type == H5I_GROUP) {
      std::string error = list_datasets(obj, path, out);
      if (!error.empty()) return error;
    }
  }
  return {};
}
}  // namespace

std::vector<std::string> ShardedFileReader::datasets() const {
  QuietHdf5 quiet;
  std::vector<std::string> names;
  std::string error;
  const hid_t root = H5Gopen2(file_.get(), "/", H5P_DEFAULT);
  if (root < 0) {
    error = hdf5_error_text();
  } else {
    H5Handle handle(root);
    error = list_datasets(root, "", names);
  }
  agree(comm_, rank_,
        error.empty() ? error : fmt::format("{}: cannot list its datasets ({})", path_.string(), error));
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> ShardedFileReader::verify_all() {
  const std::vector<std::string> names = datasets();
  QuietHdf5 quiet;
  std::vector<std::string> failing;
  std::vector<float> buf;
  for (const std::string& name : names) {
    std::string error;
    H5Handle dset = open_dataset_if_any(file_.get(), name, error);
    agree(comm_, rank_, error.empty() ? error : fmt::format("{}: cannot read ({})", path_.string(), error));
    if (!is_float32(dset.get())) continue;
    std::uint32_t stored = 0;
    const int found = read_crc_attribute(dset.get(), stored, error);
    agree(comm_, rank_,
          error.empty() ? error : fmt::format("{}: tensor {}: cannot read its checksum ({})", path_.string(), name, error));
    if (found == 0) continue;

    H5Handle space(SHARDRL_H5_REQUIRE(H5Dget_space(dset.get())));
    const std::vector<hsize_t> dims = space_dims(space.get());
    std::uint64_t total = 1;
    for (auto d : dims) total *= d;
    const std::uint64_t begin = share_begin(total, size_, rank_);
    const std::uint64_t count = share_begin(total, size_, rank_ + 1) - begin;
    const std::uint64_t largest = (total + static_cast<std::uint64_t>(size_) - 1) / static_cast<std::uint64_t>(size_);
    const std::uint64_t chunk = std::min(largest, kVerifyChunkElements);
    const std::uint64_t rounds = chunk == 0 ? 0 : (largest + chunk - 1) / chunk;
    buf.resize(std::max<std::uint64_t>(chunk, 1));
    std::uint32_t crc = 0;
    bool read_failed = false;
    for (std::uint64_t r = 0; r < rounds && !read_failed; ++r) {
      const std::uint64_t off = std::min(count, r * chunk);
      const std::uint64_t n = std::min(count - off, chunk);
      const bool failed = !transfer(false, dset.get(), dxpl_.get(), dims, begin + off, n, buf.data()).empty();
      int any = failed ? 1 : 0, any_failed = 0;
      MPI_Allreduce(&any, &any_failed, 1, MPI_INT, MPI_MAX, comm_);
      read_failed = any_failed != 0;
      crc = crc_of(buf.data(), n, crc);
    }
    if (read_failed) {
      failing.push_back(name);
      continue;
    }
    const std::vector<Slice> slices = gather_slices(comm_, size_, Slice{0, begin, count, crc});
    if (combine_slices(slices, total, name) != stored) failing.push_back(name);
  }
  return failing;
}

}  // namespace shardrl
