// docs/config.md documents every key with its type and default, and nothing else: a row per
// key "| `section.key` | type | default | meaning |" must match the schema exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "config/schema.hpp"

namespace shardrl {
namespace {

struct DocRow {
  std::string type, default_value, meaning;
};

std::map<std::string, DocRow> documented_keys() {
  std::ifstream in(std::string(SHARDRL_SOURCE_DIR) + "/docs/config.md");
  EXPECT_TRUE(in) << "docs/config.md is missing";
  std::map<std::string, DocRow> rows;
  const std::regex row(R"(^\|\s*`([a-z_]+\.[a-z_0-9]+)`\s*\|\s*([^|]+?)\s*\|\s*`([^`]*)`\s*\|\s*(.+?)\s*\|\s*$)");
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, row)) {
      EXPECT_EQ(rows.count(m[1]), 0u) << "documented twice: " << m[1];
      rows[m[1]] = DocRow{m[2], m[3], m[4]};
    }
  }
  return rows;
}

TEST(ConfigDocs, EveryKeyDocumentedWithTypeAndDefault) {
  auto rows = documented_keys();
  const Config defaults;
  for (const auto& def : config_schema()) {
    auto it = rows.find(def.full_name());
    if (it == rows.end()) {
      ADD_FAILURE() << "key " << def.full_name() << " is not documented in docs/config.md";
      continue;
    }
    EXPECT_EQ(it->second.type, kind_name(def.kind)) << def.full_name();
    EXPECT_EQ(it->second.default_value, to_toml_literal(def.get(defaults))) << def.full_name();
    for (const auto& choice : def.choices)
      EXPECT_NE(it->second.meaning.find("`" + choice + "`"), std::string::npos)
          << def.full_name() << ": value `" << choice << "` not described";
  }
}

TEST(ConfigDocs, NoDocumentedKeyIsUnknown) {
  for (const auto& [name, row] : documented_keys()) {
    auto dot = name.find('.');
    EXPECT_NE(find_key(name.substr(0, dot), name.substr(dot + 1)), nullptr)
        << "docs/config.md documents '" << name << "', which is not a key";
  }
}

}  // namespace
}  // namespace shardrl
