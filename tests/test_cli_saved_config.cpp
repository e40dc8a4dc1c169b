// A checkpoint whose saved configuration this shardrl cannot parse (written by a newer one, with a
// key this build does not know, or an older one, with a key since renamed): its keys cannot be
// compared one by one, but the seed, the task and the model the checkpoint records beside them
// are, so a resume that changes them is refused as any trajectory change is (it went on with a
// warning only, and the resumed run silently left the uninterrupted one's course).
#include <hdf5.h>

#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "job/checkpoint_format.hpp"

namespace {

using namespace cli_test;
namespace checkpoint_format = shardrl::checkpoint_format;

std::string read_text(hid_t f, const char* name) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  hid_t type = H5Dget_type(d);
  std::vector<char> text(H5Tget_size(type) + 1, '\0');
  H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
  H5Tclose(type);
  H5Dclose(d);
  return std::string(text.data());
}

// The metadata checksum recomputed from the file's values and written over the old one, as the
// shardrl that wrote such a config would have written it.
void reseal(hid_t f) {
  std::vector<std::pair<std::string, checkpoint_format::MetadataValue>> values;
  for (const checkpoint_format::MetadataName& m : checkpoint_format::metadata_names()) {
    if (H5Lexists(f, m.name, H5P_DEFAULT) <= 0) continue;
    if (m.text) {
      values.emplace_back(m.name, read_text(f, m.name));
    } else {
      std::int64_t v = 0;
      hid_t d = H5Dopen2(f, m.name, H5P_DEFAULT);
      H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v);
      H5Dclose(d);
      values.emplace_back(m.name, v);
    }
  }
  const std::int64_t checksum = checkpoint_format::metadata_checksum(values);
  hid_t d = H5Dopen2(f, checkpoint_format::kMetadataChecksum, H5P_DEFAULT);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &checksum), 0);
  H5Dclose(d);
}

// The checkpoint's /meta/config replaced by `text` (the dataset deleted and written again, as
// the writer writes strings: fixed length, null-terminated, UTF-8), the metadata resealed.
void set_config_text(const fs::path& file, const std::string& text) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << file;
  ASSERT_GE(H5Ldelete(f, "/meta/config", H5P_DEFAULT), 0);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, text.size() + 1);
  H5Tset_strpad(type, H5T_STR_NULLTERM);
  H5Tset_cset(type, H5T_CSET_UTF8);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t d = H5Dcreate2(f, "/meta/config", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.c_str()), 0);
  H5Dclose(d);
  H5Sclose(space);
  H5Tclose(type);
  reseal(f);
  H5Fclose(f);
}

std::string config_text(const fs::path& file) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  std::string text = read_text(f, "/meta/config");
  H5Fclose(f);
  return text;
}

// The checkpoint of a one-iteration run of kCheckpointJob in `dir` (its job.toml), or empty with
// the failure reported.
fs::path trained_checkpoint(const fs::path& dir) {
  write(dir / "job.toml", kCheckpointJob);
  RunResult first = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1");
  if (first.exit_code != 0) {
    ADD_FAILURE() << first.out << first.err;
    return {};
  }
  return dir / "runs" / "ck" / "checkpoints" / "iter_00000001.h5";
}

TEST(Cli, AnUnreadableSavedConfigStillRefusesAnotherSeedTaskOrModel) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  const fs::path saved = trained_checkpoint(dir);
  ASSERT_FALSE(saved.empty());
  const fs::path file = dir / "from_a_newer_shardrl.h5";
  fs::copy_file(saved, file, fs::copy_options::overwrite_existing);
  set_config_text(file, "[future]\nkey = 1\n" + config_text(saved));
  const std::string resume = mpirun(2) + " train --config job.toml --set run.iterations=2 --resume-from " +
                             file.string() + " --set run.name=";
  RunResult seed = run_in(dir, resume + "a --set run.seed=7");
  EXPECT_EQ(seed.exit_code, 2) << seed.out << seed.err;
  EXPECT_NE(seed.out.find("does not load in this shardrl"), std::string::npos) << seed.out;
  EXPECT_NE(seed.err.find("changes the run's trajectory:\n  run.seed = 1234 -> 7\n"), std::string::npos) << seed.err;
  RunResult model = run_in(dir, resume + "b --set model.preset=custom --set model.n_layers=3");
  EXPECT_EQ(model.exit_code, 2) << model.out << model.err;
  EXPECT_NE(model.err.find("changes the run's trajectory:\n  the model = tiny: "), std::string::npos) << model.err;
  RunResult task = run_in(dir, resume + "c --set rl.task=add");
  EXPECT_EQ(task.exit_code, 2) << task.out << task.err;
  EXPECT_NE(task.err.find("  rl.task = sort -> add\n"), std::string::npos) << task.err;
  RunResult same = run_in(dir, resume + "d");
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  RunResult allowed = run_in(dir, resume + "e --set run.seed=7 --allow-config-change");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.out << allowed.err;
  // inspect --verify checks what it can of a file a resume takes: the checksums, with a warning
  // that the tensors its job needs are not listed (it refused the file, checking nothing).
  RunResult verify = run_in(dir, shardrl_binary() + " inspect " + file.string() + " --verify");
  EXPECT_EQ(verify.exit_code, 0) << verify.err;
  EXPECT_NE(verify.err.find("the saved configuration does not load in this shardrl"), std::string::npos) << verify.err;
  EXPECT_NE(verify.out.find("checksums: all "), std::string::npos) << verify.out;
}

// A checkpoint whose config holds a setting that this shardrl refuses at load as having no effect
// (a rule newer than the run, here cuDNN's workspace with gemm attention): generate --checkpoint
// samples from it (it read the saved config as a new job's and refused it).
TEST(Cli, GenerateFromACheckpointTakesASettingItsRunTook) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  const fs::path saved = trained_checkpoint(dir);
  ASSERT_FALSE(saved.empty());
  const fs::path file = dir / "older.h5";
  fs::copy_file(saved, file, fs::copy_options::overwrite_existing);
  std::string text = config_text(saved);
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"cudnn_workspace_mib = 1024", "cudnn_workspace_mib = 64"},
                                 {"attention = \"auto\"", "attention = \"gemm\""}}) {
    const std::size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in\n" << text;
    text.replace(at, from.size(), to);
  }
  set_config_text(file, text);
  RunResult gen = run_in(dir, shardrl_binary() + " generate --checkpoint " + file.string() +
                                  " --prompt x --n 1 --max-new-tokens 4");
  EXPECT_EQ(gen.exit_code, 0) << gen.out << gen.err;
}

}  // namespace
