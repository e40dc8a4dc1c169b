// The resolved configuration as written (config/print.hpp): the TOML reads back to the same
// Config, a named preset's shape as comments, the table's values and origins, escaped strings.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "config/load.hpp"
#include "config/model_presets.hpp"
#include "config/print.hpp"
#include "config/schema.hpp"
#include "config_test_builds.hpp"

namespace shardrl {
namespace {

TEST(ConfigPrint, ResolvedTomlReadsBackIdentically) {
  LoadedConfig l = load_config("[run]\nname = \"a-b\"\nseed = 3\n[comm]\ntimeout_s = 1.5\n", "f",
                               {"model.precision=fp32"}, kCpu);
  ASSERT_TRUE(l.ok());
  std::string text = to_toml(l.config);
  LoadedConfig back = load_config(text, "resolved.toml", {}, kCpu);
  ASSERT_TRUE(back.ok()) << back.errors.front();
  EXPECT_EQ(to_toml(back.config), text);
  // Every key is written; a named preset's shape keys as comments (setting them would conflict).
  for (const auto& def : config_schema()) {
    bool shape_key = def.section == "model" && std::count(model_shape_keys().begin(), model_shape_keys().end(), def.key);
    if (shape_key)
      EXPECT_NE(text.find("# " + def.key + " = "), std::string::npos) << def.full_name();
    else
      EXPECT_NE(back.origin.at(def.full_name()), "default") << def.full_name() << " missing from the TOML";
  }
}

TEST(ConfigPrint, CustomShapeRoundTripsWithEveryKey) {
  LoadedConfig l = load_config("[model]\npreset = \"custom\"\nd_model = 96\nn_heads = 6\nn_kv_heads = 3\n", "f", {}, kCpu);
  ASSERT_TRUE(l.ok()) << l.errors.front();
  std::string text = to_toml(l.config);
  LoadedConfig back = load_config(text, "resolved.toml", {}, kCpu);
  ASSERT_TRUE(back.ok()) << back.errors.front();
  EXPECT_EQ(to_toml(back.config), text);
  for (const auto& def : config_schema())
    EXPECT_NE(back.origin.at(def.full_name()), "default") << def.full_name() << " missing from the TOML";
  EXPECT_EQ(resolve_model_shape(back.config.model).d_model, 96);
}

TEST(ConfigPrint, NamedPresetFixesTheShape) {
  LoadedConfig l = load_config("[model]\npreset = \"qwen3-0.6b\"\n", "f", {}, kCpu);
  ASSERT_TRUE(l.ok());
  ModelShape s = resolve_model_shape(l.config.model);
  EXPECT_EQ(s.d_model, 1024);
  EXPECT_EQ(s.n_layers, 28);
  EXPECT_TRUE(s.tie_embeddings);
  // Qwen3-0.6B has 596M parameters without the tied head, as its model card says (0.44B non-embedding).
  EXPECT_EQ(s.parameter_count(), 596049920);
  std::string table = format_config_table(l);
  EXPECT_NE(table.find("model.d_model"), std::string::npos);
  EXPECT_NE(table.find("1024"), std::string::npos) << table;
  EXPECT_NE(table.find("(preset \"qwen3-0.6b\")"), std::string::npos) << table;
  // The shape's float reals as their shortest decimals, not the floats' exact values
  // (9.999999974752427e-07), in the table and in the saved config's comments.
  const auto row = [&](const std::string& key) {
    const std::size_t at = table.find("  " + key + " ");
    return at == std::string::npos ? std::string() : table.substr(at, table.find('\n', at) - at);
  };
  EXPECT_NE(row("model.norm_eps").find(" 1e-06 "), std::string::npos) << table;
  EXPECT_NE(row("model.rope_theta").find(" 1000000.0 "), std::string::npos) << table;
  EXPECT_NE(to_toml(l.config).find("# norm_eps = 1e-06   (from preset"), std::string::npos) << to_toml(l.config);
  LoadedConfig llama = load_config("[model]\npreset = \"llama-1b\"\n", "f", {}, kCpu);
  ASSERT_TRUE(llama.ok());
  const std::string llama_toml = to_toml(llama.config);
  for (const char* line : {"# norm_eps = 1e-05 ", "# rope_scaling_factor = 32.0 ", "# rope_high_freq_factor = 4.0 "})
    EXPECT_NE(llama_toml.find(line), std::string::npos) << line << "\n" << llama_toml;
  EXPECT_EQ(llama_toml.find("e-07"), std::string::npos) << llama_toml;
}

TEST(ConfigPrint, StringsAreEscapedInTomlOutput) {
  EXPECT_EQ(to_toml_literal(ConfigValue(std::string("a\"b\\c\n"))), "\"a\\\"b\\\\c\\u000a\"");
  EXPECT_EQ(to_toml_literal(ConfigValue(true)), "true");
  EXPECT_EQ(to_toml_literal(ConfigValue(std::int64_t{-4})), "-4");
}

}  // namespace
}  // namespace shardrl
