#include "app/inspect_command.hpp"

#include <fmt/format.h>

#include <iostream>
#include <string>

#include "core/error.hpp"
#include "io/sharded_file.hpp"
#include "mpi/session.hpp"

namespace shardrl {
namespace {

bool is_tensor(const std::string& name) {
  for (const char* group : {"/model/", "/optim/exp_avg/", "/optim/exp_avg_sq/", "/reference/"})
    if (name.rfind(group, 0) == 0) return true;
  return false;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

int run_inspect(const InspectArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  try {
    ShardedFileReader in(args.path, mpi.world());
    std::string out = fmt::format("checkpoint {}\n", args.path);
    out += fmt::format("  format version {}, written by shardrl {} on {} ranks\n", in.read_int64("/meta/format_version"),
                       in.read_string("/meta/shardrl_version"), in.read_int64("/meta/world_size"));
    out += fmt::format("  iterations done {}, warm-up steps done {}, optimizer steps {} ({} skipped), seed {}\n",
                       in.read_int64("/data/iterations_done"), in.read_int64("/data/warmup_steps_done"),
                       in.read_int64("/optim/step"), in.read_int64("/optim/skipped"), in.read_int64("/rng/seed"));
    out += fmt::format("  task {}; model {}\n", in.read_string("/data/task"), in.read_string("/meta/model"));
    std::size_t tensors = 0;
    std::string table;
    for (const std::string& name : in.datasets())
      if (is_tensor(name)) {
        ++tensors;
        table += fmt::format("  {:<64} float32 {}\n", name, shape_text(in.shape(name)));
      }
    out += fmt::format("tensors ({}):\n{}", tensors, table);
    out += "config:\n" + in.read_string("/meta/config");
    std::cout << out << std::flush;
    if (args.verify) {
      const std::vector<std::string> bad = in.verify_all();
      if (!bad.empty()) {
        std::cerr << fmt::format("shardrl: {}: {} tensor(s) fail their checksum:", args.path, bad.size());
        for (const auto& b : bad) std::cerr << " " << b;
        std::cerr << "\n";
        return kExitUsage;
      }
      std::cout << fmt::format("checksums: all {} tensors verified\n", tensors);
    }
  } catch (const InputError& e) {
    std::cerr << "shardrl: " << e.what() << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace shardrl
