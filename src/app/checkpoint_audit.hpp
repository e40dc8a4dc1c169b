// What `inspect --verify` and `report` check of a checkpoint that opens: complete as a resume
// requires (every tensor its own job needs is there) and every tensor's checksum. One check for
// both, so that neither calls a checkpoint good that the other, or a resume, refuses.
#pragma once

#include <string>
#include <vector>

#include "io/sharded_file.hpp"

namespace shardrl {

struct CheckpointAudit {
  // The saved configuration's first problem when this shardrl cannot load it (written by another
  // version): completeness is then not checked (a resume compares only what it records beside
  // it); the checksums still are.
  std::string config_unreadable;
  std::vector<std::string> missing;         // tensors the checkpoint's job needs and it lacks
  std::vector<std::string> bad_checksums;   // tensors whose bytes fail their checksum
  bool ok() const { return missing.empty() && bad_checksums.empty(); }
};

// `where` names the file in messages ("iter_00000002.h5").
CheckpointAudit audit_checkpoint(ShardedFileReader& in, const std::string& where);

// "incomplete: 3 tensor(s) its job needs are missing: a b c" / "2 tensor(s) fail their
// checksum: a b": the audit's problems in one line, the first 8 names of each; "" when none.
std::string audit_problems(const CheckpointAudit& audit);

}  // namespace shardrl
