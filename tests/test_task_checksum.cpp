// The task's fingerprint that a checkpoint records and a resume compares (rl/task_checksum.hpp):
// the bytes of the files a dataset task is made of, the same wherever they are, another for any
// change to them (a line, its order, a field only a reward command reads, the tokenizer's end
// ids, the chat template), not the prompts as rendered, and none for a generated task.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "rl/task.hpp"
#include "rl/task_checksum.hpp"
#include "task_test_util.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;
using namespace task_test;

class TaskChecksum : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardrl_task_checksum_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  static std::int64_t checksum_of(const TaskOptions& o) { return task_checksum(*make_task(o)); }
  fs::path dir_;
};

TEST_F(TaskChecksum, IsTheFilesNotTheirPlace) {
  const std::string lines = "{\"prompt\": \"2+2\", \"answer\": \"4\"}\n{\"prompt\": \"3+3\", \"answer\": \"6\"}\n";
  TaskOptions o;
  o.name = "jsonl";
  o.dataset_path = write("a/data.jsonl", lines);
  const std::int64_t a = checksum_of(o);
  EXPECT_GE(a, 0);
  EXPECT_LE(a, 0xffffffffLL);
  o.dataset_path = write("scratch/copy.jsonl", lines);
  EXPECT_EQ(checksum_of(o), a) << "the same lines elsewhere";
  o.dataset_path = write("b/data.jsonl", "{\"prompt\": \"2+2\", \"answer\": \"5\"}\n{\"prompt\": \"3+3\", \"answer\": \"6\"}\n");
  EXPECT_NE(checksum_of(o), a) << "one answer changed";
  o.dataset_path = write("c/data.jsonl", "{\"prompt\": \"3+3\", \"answer\": \"6\"}\n{\"prompt\": \"2+2\", \"answer\": \"4\"}\n");
  EXPECT_NE(checksum_of(o), a) << "the lines' order (an example is drawn by its line)";
  o.dataset_path = write("d/data.jsonl", "{\"prompt\": \"2+2\", \"answer\": \"4\", \"tests\": [1]}\n"
                                         "{\"prompt\": \"3+3\", \"answer\": \"6\"}\n");
  EXPECT_NE(checksum_of(o), a) << "a field only a reward command reads";
  EXPECT_EQ(task_checksum(*task("sort", 4)), -1) << "a generated task has no files";

  // The reference: zlib's CRC-32 of the role and the file's bytes, each after its length as 8
  // bytes little-endian (the framing docs/checkpoint-format.md describes).
  o.dataset_path = write("e/data.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n");
  std::string framed;
  for (const std::string& field : {std::string("dataset"), std::string("{\"prompt\": \"a\", \"answer\": \"b\"}\n")}) {
    for (int i = 0; i < 8; ++i) framed += static_cast<char>((field.size() >> (8 * i)) & 0xff);
    framed += field;
  }
  // CRC-32 (IEEE, reflected, as zlib's), bit by bit: an implementation apart from zlib's tables.
  std::uint32_t crc = 0xffffffffu;
  for (unsigned char c : framed) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  EXPECT_EQ(checksum_of(o), static_cast<std::int64_t>(crc ^ 0xffffffffu));
}

// The text task: its dataset and the tokenizer's and template's files, not its prompts as rendered
// (a template may date them; the config's settings are compared key by key).
TEST_F(TaskChecksum, CoversTheTokenizerAndTemplateFilesOfTheTextTask) {
  const fs::path models = qwen3_models();
  if (models.empty()) GTEST_SKIP() << "the Qwen3 tokenizer files are not installed (scripts/install_test_references.sh)";
  const auto model_dir = [&](const std::string& name) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(models / file, d / file, fs::copy_options::overwrite_existing);
    return d;
  };
  TaskOptions o;
  o.name = "text";
  o.dataset_path = write("data.jsonl", "{\"prompt\": \"What is 2 + 2?\", \"answer\": \"4\"}\n");
  o.text.max_prompt_tokens = 100;
  o.text.tokenizer_dir = model_dir("model").string();
  const std::int64_t base = checksum_of(o);
  EXPECT_GE(base, 0);
  o.text.tokenizer_dir = model_dir("node_scratch_copy").string();
  EXPECT_EQ(checksum_of(o), base) << "the same files elsewhere";
  TaskOptions system = o;
  system.text.system_prompt = "Be brief.";
  EXPECT_EQ(checksum_of(system), base) << "a config key (compared as a key), not the rendering";

  const fs::path other = model_dir("other_template");
  std::ofstream(other / "chat_template.jinja") << "{% for m in messages %}{{ m.content }}{% endfor %}";
  o.text.tokenizer_dir = other.string();
  EXPECT_NE(checksum_of(o), base) << "chat_template.jinja overrides the config's";

  const fs::path more_ends = model_dir("more_end_ids");
  std::ofstream(more_ends / "generation_config.json") << R"({"eos_token_id": [151645, 151643]})";
  o.text.tokenizer_dir = more_ends.string();
  EXPECT_NE(checksum_of(o), base) << "another end id stops completions";
}

}  // namespace
}  // namespace shardrl
