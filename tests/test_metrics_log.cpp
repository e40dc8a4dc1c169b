// The metrics log (io/metrics_log.hpp): the exact text of a record (key order, integers without a
// fraction, null for non-finite values), one line per write, resuming (later iterations dropped,
// the file rewritten only when something is dropped), every malformed line reported by file:line,
// an unfinished last line of a killed job, and read_metrics reading every value back exactly.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/metrics_log.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;
using Record = std::vector<std::pair<std::string, double>>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string input_error_of(const fs::path& p, std::int64_t first_iteration) {
  try {
    MetricsLog log(p, first_iteration);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

std::vector<double> iterations_of(const fs::path& p) {
  std::vector<double> its;
  for (const Record& r : read_metrics(p)) {
    EXPECT_FALSE(r.empty());
    EXPECT_EQ(r.at(0).first, "iteration");
    its.push_back(r.at(0).second);
  }
  return its;
}

class MetricsLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("shardrl_metrics_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "metrics.jsonl";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Iterations first..last, each with a loss of 1/(i+1).
  void write_iterations(std::int64_t first_it, std::int64_t last) {
    MetricsLog log(file_, first_it);
    for (std::int64_t i = first_it; i <= last; ++i)
      log.write({{"iteration", static_cast<double>(i)}, {"loss", 1.0 / static_cast<double>(i + 1)}});
  }

  fs::path dir_;
  fs::path file_;
};

TEST_F(MetricsLogTest, WritesExactLineInGivenKeyOrder) {
  {
    MetricsLog log(file_, 0);
    EXPECT_EQ(log.path(), file_);
    log.write({{"iteration", 3},
               {"zeta", 0.5},             // keys stay in the order given, not sorted
               {"alpha", 42},             // integral: no fraction
               {"neg", -7},
               {"neg_zero", -0.0},
               {"tiny", 1.25e-05},
               {"big", 9007199254740992.0},  // 2^53: not below 2^53, written as a double
               {"nan", kNaN},
               {"inf", kInf},
               {"ninf", -kInf}});
  }
  EXPECT_EQ(slurp(file_),
            "{\"iteration\":3,\"zeta\":0.5,\"alpha\":42,\"neg\":-7,\"neg_zero\":0,\"tiny\":1.25e-05,"
            "\"big\":9.007199254740992e+15,\"nan\":null,\"inf\":null,\"ninf\":null}\n");
}

TEST_F(MetricsLogTest, EveryWriteIsOneFlushedLine) {
  MetricsLog log(file_, 0);
  log.write({{"iteration", 0}, {"loss", 2.5}});
  // Flushed at once: visible to a reader while the log is still open.
  EXPECT_EQ(slurp(file_), "{\"iteration\":0,\"loss\":2.5}\n");
  log.write({{"iteration", 1}, {"loss", 1.5}});
  EXPECT_EQ(slurp(file_), "{\"iteration\":0,\"loss\":2.5}\n{\"iteration\":1,\"loss\":1.5}\n");
}

TEST_F(MetricsLogTest, ResumeDropsIterationsFromFirstIterationOnThenAppends) {
  write_iterations(0, 4);
  ASSERT_EQ(iterations_of(file_), (std::vector<double>{0, 1, 2, 3, 4}));
  {
    MetricsLog log(file_, 2);
    // Not on opening: the records go when the first new one comes (a job that fails before
    // writing one must not lose records its checkpoint does not replace). The run continues from
    // the kept ones.
    EXPECT_EQ(iterations_of(file_), (std::vector<double>{0, 1, 2, 3, 4}));
    ASSERT_EQ(log.kept_records().size(), 2u);
    EXPECT_EQ(log.kept_records()[1], (Record{{"iteration", 1}, {"loss", 0.5}}));
    log.write({{"iteration", 2}, {"loss", 7.0}});
    EXPECT_EQ(iterations_of(file_), (std::vector<double>{0, 1, 2}));
    log.write({{"iteration", 3}, {"loss", 8.0}});
  }
  EXPECT_EQ(iterations_of(file_), (std::vector<double>{0, 1, 2, 3}));
  const auto records = read_metrics(file_);
  EXPECT_EQ(records[1], (Record{{"iteration", 1}, {"loss", 0.5}}));   // kept lines unchanged
  EXPECT_EQ(records[2], (Record{{"iteration", 2}, {"loss", 7.0}}));
  EXPECT_FALSE(fs::exists(file_.string() + ".partial"));
}

// A finished run (its checkpoint at iteration 2 of 2) keeps its final evaluation's record at 2 (no
// "loss" here standing for the iteration fields) and drops the record of an iteration 2 that a
// killed job wrote past the checkpoint, and anything later.
TEST_F(MetricsLogTest, AFinishedRunKeepsOnlyItsFinalEvaluationAtTheIterationCount) {
  spit(file_, "{\"iteration\":0,\"loss\":1}\n{\"iteration\":1,\"loss\":1}\n{\"iteration\":2,\"loss\":1}\n"
              "{\"iteration\":2,\"eval/pass@1\":0.5}\n{\"iteration\":3,\"loss\":1}\n");
  const std::string before = slurp(file_);
  { MetricsLog log(file_, 2, "loss"); }
  EXPECT_EQ(slurp(file_), before) << "nothing written, nothing dropped";
  { MetricsLog log(file_, 2, "loss"); log.write({{"iteration", 2}, {"eval/pass@1", 0.75}}); }
  EXPECT_EQ(slurp(file_), "{\"iteration\":0,\"loss\":1}\n{\"iteration\":1,\"loss\":1}\n{\"iteration\":2,\"eval/pass@1\":0.5}\n"
                          "{\"iteration\":2,\"eval/pass@1\":0.75}\n");
}

TEST_F(MetricsLogTest, ResumeFromZeroEmptiesTheLogAtItsFirstRecord) {
  write_iterations(0, 2);
  { MetricsLog log(file_, 0); }
  EXPECT_EQ(iterations_of(file_), (std::vector<double>{0, 1, 2}));
  { MetricsLog log(file_, 0); log.write({{"iteration", 0}, {"loss", 9.0}}); }
  EXPECT_EQ(slurp(file_), "{\"iteration\":0,\"loss\":9}\n");
}

// A job that writes nothing drops nothing: resumed from an older checkpoint than `latest` names
// (the crash-recovery warning's advice) and stopped before its first record, it lost the records
// the newer checkpoint still covers, and the next job could not bring them back.
TEST_F(MetricsLogTest, AJobThatWritesNothingDropsNothing) {
  write_iterations(0, 4);
  const std::string before = slurp(file_);
  { MetricsLog log(file_, 2); }
  EXPECT_EQ(slurp(file_), before);
  { MetricsLog log(file_, 5); log.write({{"iteration", 5}, {"loss", 0.1}}); }
  EXPECT_EQ(iterations_of(file_), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST_F(MetricsLogTest, ResumeBeyondTheEndKeepsEverythingAndDoesNotRewrite) {
  write_iterations(0, 4);
  const std::string before = slurp(file_);
  struct stat st_before {};
  ASSERT_EQ(::stat(file_.c_str(), &st_before), 0);
  const auto mtime_before = fs::last_write_time(file_);
  for (std::int64_t first : {5, 100}) {
    MetricsLog log(file_, first);
    struct stat st_after {};
    ASSERT_EQ(::stat(file_.c_str(), &st_after), 0);
    EXPECT_EQ(st_after.st_ino, st_before.st_ino) << "first_iteration " << first;   // not replaced
    EXPECT_EQ(fs::last_write_time(file_), mtime_before) << "first_iteration " << first;
    EXPECT_EQ(slurp(file_), before);
  }
  { MetricsLog log(file_, 5); log.write({{"iteration", 5}, {"loss", 0.25}}); }
  EXPECT_EQ(slurp(file_), before + "{\"iteration\":5,\"loss\":0.25}\n");
}

TEST_F(MetricsLogTest, CreatesAMissingFileButNotItsDirectory) {
  { MetricsLog log(file_, 7); }
  EXPECT_TRUE(fs::exists(file_));
  EXPECT_EQ(slurp(file_), "");
  const fs::path nowhere = dir_ / "no_such_dir" / "metrics.jsonl";
  const std::string msg = input_error_of(nowhere, 0);
  EXPECT_NE(msg.find("cannot open metrics log '" + nowhere.string() + "'"), std::string::npos) << msg;
}

TEST_F(MetricsLogTest, MalformedLineIsAnInputErrorNamingFileAndLine) {
  const std::string good = "{\"iteration\":0,\"loss\":1}\n";
  // read_metrics refuses them alike: its readers take a record's iteration from its front.
  const struct {
    std::string bad_line;
    std::string expect;
  } cases[] = {
      {"not json", "not valid JSON"},
      {"{\"iteration\":1,", "not valid JSON"},
      {"{\"iteration\":1,\"loss\":1e999}", "not valid JSON"},   // nlohmann's out_of_range, not a parse_error
      {"[1,2]", "expected a JSON object, got array"},
      {"{\"loss\":1}", "expected a numeric \"iteration\" field"},
      {"{\"iteration\":\"1\"}", "expected a numeric \"iteration\" field"},
      {"{\"iteration\":null}", "expected a numeric \"iteration\" field"},
  };
  for (const auto& c : cases) {
    // The bad line is line 3 (after a blank line 2, which counts), and is followed by a good one.
    const std::string text = good + "\n" + c.bad_line + "\n" + good;
    spit(file_, text);
    const std::string msg = input_error_of(file_, 0);
    EXPECT_NE(msg.find(file_.string() + ":3: " + c.expect), std::string::npos)
        << "line '" << c.bad_line << "': " << msg;
    EXPECT_EQ(slurp(file_), text);   // left as it was
    bool threw = false;
    try {
      read_metrics(file_);
    } catch (const InputError& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find(file_.string() + ":3: " + c.expect), std::string::npos) << e.what();
    }
    EXPECT_TRUE(threw) << c.bad_line;
  }
}

TEST_F(MetricsLogTest, UnfinishedLastLineOfAKilledJobIsDropped) {
  write_iterations(0, 2);
  const std::string complete = slurp(file_);
  spit(file_, complete + "{\"iteration\":3,\"lo");   // killed while writing iteration 3
  EXPECT_EQ(iterations_of(file_), (std::vector<double>{0, 1, 2}));   // readers skip it too
  {
    MetricsLog log(file_, 3);
    log.write({{"iteration", 3}, {"loss", 0.25}});
    EXPECT_EQ(slurp(file_), complete + "{\"iteration\":3,\"loss\":0.25}\n");
  }
  EXPECT_EQ(iterations_of(file_), (std::vector<double>{0, 1, 2, 3}));

  // A complete last record that only lacks its newline is kept, and the next starts a new line.
  spit(file_, complete + "{\"iteration\":3,\"loss\":0.25}");
  { MetricsLog log(file_, 4); log.write({{"iteration", 4}, {"loss", 0.2}}); }
  EXPECT_EQ(slurp(file_), complete + "{\"iteration\":3,\"loss\":0.25}\n{\"iteration\":4,\"loss\":0.2}\n");

  // Only the last line can be unfinished: a bad line with a newline after it is an error.
  spit(file_, complete + "{\"iteration\":3,\"lo\n");
  EXPECT_NE(input_error_of(file_, 3).find(file_.string() + ":4: not valid JSON"), std::string::npos);
}

TEST_F(MetricsLogTest, ReadMetricsRoundTripsEveryValue) {
  const std::vector<Record> written = {
      {{"iteration", 0}, {"reward_mean", 1.0 / 3.0}, {"kl", 1e-300}, {"loss", -2.5e10},
       {"tokens", 123456789}, {"huge", 1e300}, {"above_2_53", 9007199254740994.0},
       {"denormal", 4.9e-324}, {"neg_big", -123456789012345.0}},
      {{"iteration", 1}, {"reward_mean", 0.1}, {"pass_rate", kNaN}, {"loss", kInf}},
  };
  {
    MetricsLog log(file_, 0);
    for (const Record& r : written) log.write(r);
  }
  const auto read = read_metrics(file_);
  ASSERT_EQ(read.size(), written.size());
  for (std::size_t i = 0; i < written.size(); ++i) {
    ASSERT_EQ(read[i].size(), written[i].size()) << "record " << i;
    for (std::size_t k = 0; k < written[i].size(); ++k) {
      EXPECT_EQ(read[i][k].first, written[i][k].first);   // same keys, same order
      const double w = written[i][k].second;
      const double r = read[i][k].second;
      if (std::isfinite(w))
        EXPECT_EQ(r, w) << written[i][k].first;            // bit-exact
      else
        EXPECT_TRUE(std::isnan(r)) << written[i][k].first;  // null reads back as NaN
    }
  }
}

TEST_F(MetricsLogTest, ReadMetricsErrors) {
  const fs::path missing = dir_ / "missing.jsonl";
  try {
    read_metrics(missing);
    ADD_FAILURE() << "no InputError for a missing file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read metrics file '" + missing.string() + "'"),
              std::string::npos) << e.what();
  }
  spit(file_, "{\"iteration\":0,\"task\":\"sort\"}\n");
  try {
    read_metrics(file_);
    ADD_FAILURE() << "no InputError for a string value";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(file_.string() +
                                         ":1: value of \"task\" must be a number or null, got string"),
              std::string::npos) << e.what();
  }
  spit(file_, "\n  \n{\"iteration\":0}\n\n");   // blank lines are no records
  EXPECT_EQ(read_metrics(file_).size(), 1u);
}

TEST_F(MetricsLogTest, RecordWithoutLeadingIterationOrWithARepeatedKeyIsABug) {
  MetricsLog log(file_, 0);
  EXPECT_DEATH(log.write({{"loss", 1.0}}), "starts with its \"iteration\"");
  EXPECT_DEATH(log.write({}), "starts with its \"iteration\"");
  EXPECT_DEATH(log.write({{"iteration", kNaN}}), "iteration is finite");
  EXPECT_DEATH(log.write({{"iteration", 0}, {"loss", 1.0}, {"loss", 2.0}}), "'loss' appears twice");
  EXPECT_EQ(slurp(file_), "");
}

}  // namespace
}  // namespace shardrl
