#include "app/inspect_command.hpp"

#include <fmt/format.h>

#include <iostream>
#include <string>

#include "core/error.hpp"
#include "app/checkpoint_audit.hpp"
#include "app/job_config.hpp"
#include "job/checkpoint_format.hpp"
#include "job/job_checkpoint.hpp"
#include "mpi/session.hpp"

namespace shardrl {
namespace {

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

int run_inspect(const InspectArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  try {
    namespace f = checkpoint_format;
    const std::unique_ptr<ShardedFileReader> opened = open_checkpoint(args.path, mpi.world());
    ShardedFileReader& in = *opened;
    std::string out = fmt::format("checkpoint {}\n", args.path);
    out += fmt::format("  format version {}, written by shardrl {} on {} ranks\n", in.read_int64(f::kFormatVersion),
                       in.read_string(f::kShardrlVersion), in.read_int64(f::kWorldSize));
    out += fmt::format("  iterations done {}, warm-up steps done {}, optimizer steps {} ({} skipped), seed {}\n",
                       in.read_int64(f::kIterationsDone), in.read_int64(f::kWarmupStepsDone),
                       in.read_int64(f::kOptimStep), in.read_int64(f::kOptimSkipped), in.read_int64(f::kSeed));
    out += fmt::format("  task {}{}; model {}\n", in.read_string(f::kTask),
                       in.has(f::kTaskChecksum) ? fmt::format(" (files' checksum {:08x})", in.read_int64(f::kTaskChecksum))
                                                : "",
                       in.read_string(f::kModelSummary));
    std::size_t tensors = 0;
    std::string table;
    for (const std::string& name : in.datasets())
      if (f::is_tensor(name)) {
        ++tensors;
        table += fmt::format("  {:<64} float32 {}\n", name, shape_text(in.shape(name)));
      }
    out += fmt::format("tensors ({}):\n{}", tensors, table);
    out += "config:\n" + in.read_string(f::kConfig);
    std::cout << out << std::flush;
    if (args.verify) {
      const CheckpointAudit audit = audit_checkpoint(in, args.path);
      if (!audit.config_unreadable.empty())
        print_error(fmt::format("warning: {}: the saved configuration does not load in this shardrl ({}): the "
                                "tensors its job needs are not listed; the checksums are checked",
                                args.path, audit.config_unreadable));
      if (!audit.ok()) {
        print_error(args.path + ": " + audit_problems(audit));
        return kExitUsage;
      }
      std::cout << fmt::format("checksums: all {} tensors verified\n", tensors);
    }
  } catch (const InputError& e) {
    print_error(e.what());
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace shardrl
