// --set values read as the file's are: TOML's integer forms, ranges named, text UTF-8.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/load.hpp"
#include "config_test_builds.hpp"

namespace shardrl {
namespace {

// --set reads a number as the file does: TOML's integers (+5, 1_024, 0x10), and a value beyond
// the type's range is named as such (1e-400 read as 0 turned a key off silently).
TEST(ConfigSetValues, CommandLineNumbersReadAsTheFileReadsThem) {
  LoadedConfig l = load_config("", "f", {"run.seed=+5", "rl.prompts_per_iteration=1_024", "rl.minibatches=0x10"}, kCpu);
  ASSERT_TRUE(l.ok()) << l.errors.front();
  EXPECT_EQ(l.config.run.seed, 5);
  EXPECT_EQ(l.config.rl.prompts_per_iteration, 1024);
  EXPECT_EQ(l.config.rl.minibatches, 16);
  l = load_config("", "f", {"rl.kl_coef=1e-400", "optim.lr=1e400", "run.seed=99999999999999999999", "run.seed=5\nx=1"},
                  kCpu);
  ASSERT_EQ(l.errors.size(), 4u);
  EXPECT_EQ(l.errors[0], "--set rl.kl_coef=1e-400: rl.kl_coef: 1e-400 is beyond a double's range");
  EXPECT_EQ(l.errors[1], "--set optim.lr=1e400: optim.lr: 1e400 is beyond a double's range");
  EXPECT_EQ(l.errors[2], "--set run.seed=99999999999999999999: run.seed: 99999999999999999999 is out of range (a "
                         "64-bit integer)");
  EXPECT_EQ(l.errors[3], "--set run.seed=5\nx=1: run.seed: expected an integer, got '5\nx=1'");
}

// Text must be UTF-8, as TOML's: config.toml and each checkpoint's saved config hold it, and a
// Latin-1 path given by --set made them unreadable (convert, report, generate --checkpoint).
TEST(ConfigSetValues, TextMustBeUtf8) {
  LoadedConfig l = load_config("", "f", {"run.dir=r\xff", "rl.reward_command=[\"judge\", \"\xe9\"]", "run.dir=\xc3\xa9t\xc3\xa9"},
                               kCpu);
  ASSERT_EQ(l.errors.size(), 2u);
  EXPECT_EQ(l.errors[0], "--set run.dir=r\xff: run.dir: is not valid UTF-8 text, which the saved config.toml must hold");
  EXPECT_EQ(l.errors[1].rfind("--set rl.reward_command=", 0), 0u) << l.errors[1];
  EXPECT_EQ(l.config.run.dir, "\xc3\xa9t\xc3\xa9");
}

}  // namespace
}  // namespace shardrl
