// Completeness and checksums of a checkpoint, for inspect --verify and report (checkpoint_audit.hpp).
#include "app/checkpoint_audit.hpp"

#include <fmt/format.h>

#include "app/job_config.hpp"
#include "job/checkpoint_format.hpp"
#include "job/job_checkpoint.hpp"

namespace shardrl {

CheckpointAudit audit_checkpoint(ShardedFileReader& in, const std::string& where) {
  namespace f = checkpoint_format;
  CheckpointAudit audit;
  const LoadedConfig saved = parse_saved_config(in.read_string(f::kConfig), where + ":" + f::kConfig);
  if (saved.ok()) audit.missing = missing_tensors(in, saved.config);
  else audit.config_unreadable = saved.errors.front();
  audit.bad_checksums = in.verify_all(f::is_tensor);
  return audit;
}

namespace {
std::string names(const std::vector<std::string>& list) {
  std::string out;
  for (std::size_t i = 0; i < list.size() && i < 8; ++i) out += " " + list[i];
  return out + (list.size() > 8 ? " ..." : "");
}
}  // namespace

std::string audit_problems(const CheckpointAudit& audit) {
  std::string out;
  if (!audit.missing.empty())
    out += fmt::format("incomplete checkpoint: {} tensor(s) its job needs are missing:{}", audit.missing.size(),
                       names(audit.missing));
  if (!audit.bad_checksums.empty())
    out += fmt::format("{}{} tensor(s) fail their checksum:{}", out.empty() ? "" : "; ", audit.bad_checksums.size(),
                       names(audit.bad_checksums));
  return out;
}

}  // namespace shardrl
