// Sharded HDF5 checkpoint I/O against the disk's plain sequential bandwidth, measured in one run.
// For every parameter of a model preset, three float32 tensors (/model/<name>,
// /optim/exp_avg/<name>, /optim/exp_avg_sq/<name>) are written by all ranks, each holding an
// even share of every tensor's elements (from one reused host buffer), then read back without
// and with crc32 verification. Then rank 0 writes the same number of bytes to one file with
// write() in large blocks + fsync and reads it back with read(). Prints GB/s of each and the
// ratios checkpoint / baseline. Files are deleted at the end.
//   mpirun -np 2 bench_checkpoint_io [--preset llama-1b] [--dir /tmp/ckpt_bench] [--cold] [--block-mib 64]
//                                    [--repeat 1]
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "config/model_presets.hpp"
#include "core/error.hpp"
#include "io/sharded_file.hpp"
#include "model/param_spec.hpp"

using namespace shardrl;

namespace {

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::uint64_t numel = 0;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds (user + system) of this process, all its threads.
double cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

struct Timing {
  double wall = 0;   // seconds on the slowest rank
  double cpu = 0;    // CPU seconds of all ranks together (kernel writeback threads not included)
};

// What `fn` takes (barrier before and after).
template <class Fn>
Timing timed(Fn&& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now_s(), c0 = cpu_s();
  fn();
  const double cpu = cpu_s() - c0;
  MPI_Barrier(MPI_COMM_WORLD);
  Timing t{now_s() - t0, 0};
  MPI_Allreduce(&cpu, &t.cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return t;
}

// A barrier that sleeps instead of spinning: while rank 0 runs the baseline alone, the other
// ranks must not take a core from it (Open MPI busy-polls in MPI_Barrier).
void sleeping_barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    ::usleep(1000);
  }
}

[[noreturn]] void die(const std::string& what, const std::filesystem::path& path) {
  fmt::print(stderr, "bench_checkpoint_io: cannot {} '{}': {}\n", what, path.string(), std::strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// Drops the file's pages from the page cache (they are clean after fsync), so that the next read
// comes from the disk.
void drop_cache(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open", path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

std::uint64_t share_begin(std::uint64_t n, int parts, int r) {
  return n * static_cast<std::uint64_t>(r) / static_cast<std::uint64_t>(parts);
}

void baseline_write(const std::filesystem::path& path, std::uint64_t bytes, const std::vector<char>& block) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("create", path);
  for (std::uint64_t done = 0; done < bytes;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block.size(), bytes - done));
    const ssize_t w = ::write(fd, block.data(), n);
    if (w < 0) {
      if (errno == EINTR) continue;
      die("write", path);
    }
    done += static_cast<std::uint64_t>(w);
  }
  if (::fsync(fd) != 0) die("fsync", path);
  ::close(fd);
}

void baseline_read(const std::filesystem::path& path, std::uint64_t bytes, std::vector<char>& block) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open", path);
  std::uint64_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::read(fd, block.data(), block.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      die("read", path);
    }
    if (r == 0) break;
    done += static_cast<std::uint64_t>(r);
  }
  ::close(fd);
  if (done != bytes) die("read all of", path);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  CLI::App app{"Sharded HDF5 checkpoint save/load bandwidth against plain sequential write()/read()"};
  std::string preset = "llama-1b";
  std::string dir = "/tmp/ckpt_bench";
  bool cold = false;
  int block_mib = 64;
  int repeat = 1;
  app.add_option("--preset", preset, "model preset whose parameter shapes are saved")
      ->check(CLI::IsMember(model_preset_names()));
  app.add_option("--dir", dir, "directory for the checkpoint and baseline files (created)");
  app.add_flag("--cold", cold, "drop each file's cached pages before reading it (reads from the disk)");
  app.add_option("--block-mib", block_mib, "block size of the baseline's write()/read() calls")
      ->check(CLI::Range(1, 1024));
  app.add_option("--repeat", repeat, "repetitions (save, loads, baseline each time); medians are reported")
      ->check(CLI::Range(1, 100));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : e.get_exit_code();
    MPI_Finalize();
    return code;
  }

  ModelConfig model;
  model.preset = preset;
  const ModelShape shape = resolve_model_shape(model);
  std::vector<Tensor> tensors;
  std::uint64_t params = 0;
  for (const auto& unit : model_units(shape))
    for (const auto& p : unit.params) {
      std::vector<std::uint64_t> s(p.shape.begin(), p.shape.end());
      const auto n = static_cast<std::uint64_t>(p.numel());
      params += n;
      for (const char* prefix : {"/model/", "/optim/exp_avg/", "/optim/exp_avg_sq/"})
        tensors.push_back({prefix + p.name, s, n});
    }
  const std::uint64_t bytes = 3 * params * sizeof(float);

  // One host buffer for every tensor: this rank's largest share.
  std::uint64_t largest = 0;
  for (const auto& t : tensors)
    largest = std::max(largest, share_begin(t.numel, size, rank + 1) - share_begin(t.numel, size, rank));
  std::vector<float> buf(std::max<std::uint64_t>(largest, 1));
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i & 0xffff) * 1e-3f + static_cast<float>(rank);

  const std::filesystem::path directory(dir);
  const std::filesystem::path ckpt = directory / "checkpoint_bench.h5";
  const std::filesystem::path plain = directory / "baseline_bench.bin";
  if (rank == 0) std::filesystem::create_directories(directory);
  MPI_Barrier(MPI_COMM_WORLD);

  // Each repetition: save, load, load + verify, then the baseline's write and read. Medians
  // are reported (the disk's speed drifts over a run).
  std::vector<Timing> save_s, load_s, verify_s, base_write_s, base_read_s;
  std::uint64_t file_bytes = 0;
  std::vector<char> block;
  if (rank == 0) {
    block.resize(static_cast<std::size_t>(block_mib) << 20);
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131);
  }
  for (int rep = 0; rep < repeat; ++rep) {
    int failed = 0;
    try {
      save_s.push_back(timed([&] {
        ShardedFileWriter writer(ckpt, MPI_COMM_WORLD);
        for (const auto& t : tensors) {
          const std::uint64_t b = share_begin(t.numel, size, rank), e = share_begin(t.numel, size, rank + 1);
          writer.write(t.name, t.shape, b, e - b, buf.data());
        }
        writer.write_int64("/state/iteration", 1);
        writer.close();
      }));
      if (rank == 0) file_bytes = std::filesystem::file_size(ckpt);
      for (int pass = 0; pass < 2; ++pass) {
        if (cold && rank == 0) drop_cache(ckpt);
        const Timing s = timed([&] {
          ShardedFileReader reader(ckpt, MPI_COMM_WORLD);
          for (const auto& t : tensors) {
            const std::uint64_t b = share_begin(t.numel, size, rank), e = share_begin(t.numel, size, rank + 1);
            reader.read(t.name, t.shape, b, e - b, buf.data(), pass == 1);
          }
        });
        (pass == 0 ? load_s : verify_s).push_back(s);
      }
    } catch (const InputError& e) {
      if (rank == 0) fmt::print(stderr, "bench_checkpoint_io: {}\n", e.what());
      failed = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) std::filesystem::remove(ckpt);   // also frees its cached pages before the baseline
    if (failed) {
      MPI_Finalize();
      return 1;
    }
    if (rank == 0) {
      double t0 = now_s(), c0 = cpu_s();
      baseline_write(plain, bytes, block);
      base_write_s.push_back({now_s() - t0, cpu_s() - c0});
      if (cold) drop_cache(plain);
      t0 = now_s();
      c0 = cpu_s();
      baseline_read(plain, bytes, block);
      base_read_s.push_back({now_s() - t0, cpu_s() - c0});
      std::filesystem::remove(plain);
    }
    sleeping_barrier();
  }

  if (rank == 0) {
    auto median = [](const std::vector<Timing>& timings, double Timing::*field) {
      std::vector<double> v;
      for (const Timing& t : timings) v.push_back(t.*field);
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    auto wall = [&](const std::vector<Timing>& v) { return median(v, &Timing::wall); };
    auto gbs = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
    auto line = [&](const std::string& what, const std::vector<Timing>& v) {
      std::string all;
      for (const Timing& t : v) all += fmt::format(" {:.2f}", t.wall);
      fmt::print("  {:<52} {:8.2f} s {:7.2f} GB/s {:7.1f} CPU s   (runs:{})\n", what, wall(v), gbs(wall(v)),
                 median(v, &Timing::cpu), all);
    };
    fmt::print("checkpoint_io: preset {}, {} tensors ({} parameters x 3), {:.2f} GB of float32, {} ranks, {}, "
               "median of {} run(s)\n",
               preset, tensors.size(), params, static_cast<double>(bytes) / 1e9, size, directory.string(), repeat);
    fmt::print("  checkpoint file: {:.2f} GB ({:+.2f}% over the tensors' bytes)\n", static_cast<double>(file_bytes) / 1e9,
               100.0 * (static_cast<double>(file_bytes) / static_cast<double>(bytes) - 1.0));
    line("checkpoint save (all ranks, write + close + fsync)", save_s);
    line("checkpoint load (all ranks)", load_s);
    line("checkpoint load + crc32 verify (all ranks)", verify_s);
    line(fmt::format("baseline write (rank 0, write() {} MiB + fsync)", block_mib), base_write_s);
    line(fmt::format("baseline read (rank 0, read() {} MiB)", block_mib), base_read_s);
    fmt::print("  ratio save / baseline write: {:.2f}\n", wall(base_write_s) / wall(save_s));
    fmt::print("  ratio load / baseline read:  {:.2f}   (load + verify / baseline read: {:.2f})\n",
               wall(base_read_s) / wall(load_s), wall(base_read_s) / wall(verify_s));
    fmt::print("  page cache: {}\n",
               cold ? "each file's cached pages were dropped (fsync + POSIX_FADV_DONTNEED) before reading it, so "
                      "both reads come from the disk"
                    : "each read follows its own write (checkpoint: save then load; baseline: write then read), so "
                      "both may be served partly from the page cache, alike; --cold reads from the disk");
  }
  MPI_Finalize();
  return 0;
}
