// The safetensors reader and writer: round trips (F32 exact, BF16 rounded once and then exact),
// F16 widened exactly, files written by the format's rules read back, and every malformed header
// refused with a message naming the file and the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include <unistd.h>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "io/text_file.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

fs::path dir_path() { return fs::temp_directory_path() / ("shardrl_safetensors_" + std::to_string(::getpid())); }

// Removed when the test program ends.
struct TestDir {
  TestDir() { fs::create_directories(dir_path()); }
  ~TestDir() {
    std::error_code ec;
    fs::remove_all(dir_path(), ec);
  }
};
const TestDir test_dir;

fs::path dir() { return dir_path(); }

// A file from a header text and a data section, as another writer would produce it.
fs::path raw_file(const std::string& name, const std::string& header, const std::string& data,
                  std::uint64_t claimed_length = std::uint64_t(-1)) {
  const std::uint64_t n = claimed_length == std::uint64_t(-1) ? header.size() : claimed_length;
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  bytes += header + data;
  const fs::path p = dir() / name;
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}

std::string refusal(const fs::path& p) {
  try {
    SafetensorsFile f(p);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Safetensors, RoundTripsF32ExactlyAndBf16AfterOneRounding) {
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(6 * 5), b(7), c(0);
  for (auto& x : a) x = nd(gen);
  for (auto& x : b) x = nd(gen) * 1e-3f;
  const fs::path p = dir() / "round.safetensors";
  write_safetensors(p,
                    {{"model.layers.0.mlp.up_proj.weight", {6, 5}, StDtype::f32, a.data()},
                     {"model.norm.weight", {7}, StDtype::bf16, b.data()},
                     {"empty", {0, 3}, StDtype::f32, c.data()}},
                    {{"format", "pt"}});
  SafetensorsFile f(p);
  EXPECT_EQ(f.header().metadata.at("format"), "pt");
  EXPECT_EQ(f.header().data_offset % 8, 0u) << "the data section starts 8-byte aligned";
  ASSERT_NE(f.find("model.layers.0.mlp.up_proj.weight"), nullptr);
  EXPECT_EQ(f.find("model.layers.0.mlp.up_proj.weight")->shape, (std::vector<std::int64_t>{6, 5}));
  EXPECT_EQ(f.read_f32("model.layers.0.mlp.up_proj.weight"), a);
  EXPECT_EQ(f.read_f32("model.layers.0.mlp.up_proj.weight", 7, 11), std::vector<float>(a.begin() + 7, a.begin() + 18));
  const std::vector<float> back = f.read_f32("model.norm.weight");
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(back[i], static_cast<float>(bf16(b[i]))) << i;
  EXPECT_TRUE(f.read_f32("empty").empty());
  // What was read, written again in its own type, is the same bytes.
  const fs::path q = dir() / "again.safetensors";
  write_safetensors(q, {{"model.layers.0.mlp.up_proj.weight", {6, 5}, StDtype::f32, a.data()},
                        {"model.norm.weight", {7}, StDtype::bf16, back.data()},
                        {"empty", {0, 3}, StDtype::f32, c.data()}},
                    {{"format", "pt"}});
  SafetensorsFile g(q);
  for (const char* name : {"model.layers.0.mlp.up_proj.weight", "model.norm.weight"})
    EXPECT_EQ(g.read_bytes(name), f.read_bytes(name)) << name;
  EXPECT_FALSE(fs::exists(q.string() + ".partial"));
}

// The writer converts and writes a tensor in pieces of 2^20 elements: a tensor of several
// pieces and a part reads back whole, in both dtypes.
TEST(Safetensors, TensorsLargerThanTheWritersPieceRoundTrip) {
  const std::int64_t numel = 2 * (1 << 20) + 5;
  std::vector<float> a(static_cast<std::size_t>(numel));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 1000) * 0.37f - 100.0f;
  const fs::path p = dir() / "pieces.safetensors";
  write_safetensors(p, {{"small", {3}, StDtype::f32, a.data() + 7},
                        {"big16", {numel}, StDtype::bf16, a.data()},
                        {"big32", {numel}, StDtype::f32, a.data()}});
  SafetensorsFile f(p);
  EXPECT_EQ(f.read_f32("big32"), a);
  const std::vector<float> back = f.read_f32("big16");
  ASSERT_EQ(back.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (back[i] != static_cast<float>(bf16(a[i]))) FAIL() << "element " << i;
  EXPECT_EQ(f.read_f32("small"), std::vector<float>(a.begin() + 7, a.begin() + 10));
  EXPECT_EQ(fs::file_size(p), f.header().data_offset + 3 * 4 + static_cast<std::uint64_t>(numel) * 6);
}

// A tensor given by `fill` is asked for when the writer reaches it, after the tensors before it
// are written (so an export holds one tensor at a time), and reads back as its values would.
TEST(Safetensors, FilledTensorsAreAskedForInTurnAndWrittenAsValues) {
  const fs::path p = dir() / "filled.safetensors";
  const fs::path partial = p.string() + ".partial";
  std::vector<float> a(5), b(3);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * static_cast<float>(i) - 1.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 3.0f + static_cast<float>(i);
  std::vector<std::uintmax_t> written_before;   // the file's size when each fill was called
  auto fill_from = [&](const std::vector<float>& v) {
    return [&, v](float* out) {
      written_before.push_back(fs::file_size(partial));
      std::copy(v.begin(), v.end(), out);
    };
  };
  write_safetensors(p, {{"first", {5}, StDtype::f32, nullptr, fill_from(a)},
                        {"second", {3}, StDtype::bf16, nullptr, fill_from(b)}});
  SafetensorsFile f(p);
  EXPECT_EQ(f.read_f32("first"), a);
  EXPECT_EQ(f.read_f32("second"), b);   // exact in bf16
  ASSERT_EQ(written_before.size(), 2u);
  EXPECT_EQ(written_before[0], f.header().data_offset) << "the first tensor is asked for after the header";
  EXPECT_EQ(written_before[1], f.header().data_offset + 5 * 4) << "the second after the first's bytes";
}

// The files under the writer: a file left uncommitted (an export that failed on the way)
// leaves the old file as it was and no temporary; committed, it replaces the old one.
TEST(AtomicFile, UncommittedLeavesTheOldFileAndNoTemporary) {
  const fs::path p = dir() / "atomic.bin";
  write_text_atomically(p, "old");
  {
    AtomicFile file(p);
    file.append("new and longer");
    EXPECT_TRUE(fs::exists(p.string() + ".partial"));
  }
  EXPECT_FALSE(fs::exists(p.string() + ".partial"));
  std::ifstream in(p);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "old");
  {
    AtomicFile file(p);
    file.append("new ");
    file.append("and longer");
    file.commit();
  }
  std::ifstream again(p);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(again), {}), "new and longer");
  EXPECT_FALSE(fs::exists(p.string() + ".partial"));
}

TEST(Safetensors, ReadsF16AndAnotherWritersLayout) {
  // 1.0, -2.0, the smallest subnormal, +inf; offsets in an order other than the keys'.
  const std::uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7c00};
  std::string data(reinterpret_cast<const char*>(h), 8);
  const float f32 = 0.5f;
  data.insert(0, reinterpret_cast<const char*>(&f32), 4);
  const fs::path p = raw_file("f16.safetensors",
                              R"({"b":{"dtype":"F16","shape":[2,2],"data_offsets":[4,12]},)"
                              R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                              data);
  SafetensorsFile f(p);
  const std::vector<float> v = f.read_f32("b");
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(v[3]));
  EXPECT_EQ(f.read_f32("a"), std::vector<float>{0.5f});
}

TEST(Safetensors, MalformedHeadersAreRefusedNamingTheProblem) {
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data(8, '\0');
  struct Case {
    const char* file;
    std::string header, data;
    std::uint64_t claimed;
    const char* message;
  };
  const Case cases[] = {
      {"empty", "", "", std::uint64_t(-1), "header is not valid JSON"},
      {"long", "{}", "", 1000, "header length 1000 runs past the end of the file"},
      {"huge", "{}", "", std::uint64_t(1) << 40, "exceeds the format's limit"},
      {"json", "{\"w\": ", data, std::uint64_t(-1), "header is not valid JSON"},
      {"array", "[1,2]", data, std::uint64_t(-1), "header is not a JSON object"},
      {"dtype", R"({"w":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", data, std::uint64_t(-1),
       "tensor 'w': dtype I8 is not one shardrl reads"},
      {"shape", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data, std::uint64_t(-1),
       "tensor 'w': shape holds something other than non-negative integers"},
      {"offsets", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data, std::uint64_t(-1),
       "tensor 'w': data_offsets is not a pair"},
      {"past", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data, std::uint64_t(-1),
       "tensor 'w': data_offsets [0, 16] run past the data section (8 bytes)"},
      {"size", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data, std::uint64_t(-1),
       "tensor 'w': 8 bytes in data_offsets, but 3 elements of F32 take 12"},
      {"backwards", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data, std::uint64_t(-1),
       "run backwards"},
      {"overlap",
       "{" + ok_entry + R"(,"v":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})", data, std::uint64_t(-1),
       "tensors 'w' and 'v' overlap in the data section"},
      {"metadata", R"({"__metadata__":{"n":1}})", "", std::uint64_t(-1), "__metadata__ value of 'n' is not a string"},
  };
  for (const Case& c : cases) {
    const fs::path p = raw_file(std::string(c.file) + ".safetensors", c.header, c.data, c.claimed);
    const std::string got = refusal(p);
    EXPECT_NE(got.find(p.string() + ": "), std::string::npos) << c.file << ": " << got;
    EXPECT_NE(got.find(c.message), std::string::npos) << c.file << ": " << got;
  }
  EXPECT_NE(refusal(dir() / "absent.safetensors").find("cannot read safetensors file"), std::string::npos);
  std::ofstream(dir() / "tiny.safetensors", std::ios::binary).write("abc", 3);
  EXPECT_NE(refusal(dir() / "tiny.safetensors").find("3 bytes: too short for a safetensors file"), std::string::npos);
  SafetensorsFile good(raw_file("good.safetensors", "{" + ok_entry + "}", data));
  try {
    good.read_f32("missing");
    ADD_FAILURE() << "a missing tensor was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'missing'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardrl
