// The key table. To add a key: add the field to config.hpp, one entry here, and a row in
// docs/config.md (the docs test fails until all three agree).
#include "config/schema.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include <toml++/toml.h>

namespace shardrl {
namespace {

template <class Section, class T>
KeyDef field(std::string section, std::string key, ValueKind kind, std::string meaning,
             Section Config::*sec, T Section::*member) {
  KeyDef d;
  d.section = std::move(section);
  d.key = std::move(key);
  d.kind = kind;
  d.meaning = std::move(meaning);
  d.set = [sec, member](Config& c, const ConfigValue& v) {
    if constexpr (std::is_same_v<T, double>) {
      (c.*sec).*member = std::holds_alternative<double>(v)
                             ? std::get<double>(v)
                             : static_cast<double>(std::get<std::int64_t>(v));
    } else {
      (c.*sec).*member = std::get<T>(v);
    }
  };
  d.get = [sec, member](const Config& c) { return ConfigValue((c.*sec).*member); };
  return d;
}

// An enum field stored as its name; `names` are in the enum's declaration order.
template <class Section, class E>
KeyDef choice(std::string section, std::string key, std::string meaning,
              Section Config::*sec, E Section::*member, std::vector<std::string> names) {
  KeyDef d;
  d.section = std::move(section);
  d.key = std::move(key);
  d.kind = ValueKind::choice;
  d.meaning = std::move(meaning);
  d.choices = names;
  d.set = [sec, member, names](Config& c, const ConfigValue& v) {
    const auto& s = std::get<std::string>(v);
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == s) (c.*sec).*member = static_cast<E>(i);
  };
  d.get = [sec, member, names](const Config& c) {
    return ConfigValue(names.at(static_cast<std::size_t>((c.*sec).*member)));
  };
  return d;
}

KeyDef with_min(KeyDef d, double min, bool exclusive = false) {
  d.min = min;
  d.min_exclusive = exclusive;
  return d;
}

std::string check_plain_name(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s.empty()) return "must not be empty";
  if (s == "." || s == "..") return "must be a plain name, not '" + s + "'";
  for (char ch : s) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.';
    if (!ok) return "must contain only letters, digits, '-', '_' and '.', got \"" + s + "\"";
  }
  return "";
}

std::string check_non_empty(const ConfigValue& v) {
  return std::get<std::string>(v).empty() ? "must not be empty" : "";
}

std::vector<KeyDef> build_schema() {
  using VK = ValueKind;
  std::vector<KeyDef> s;

  KeyDef name = field("run", "name", VK::string,
                      "Name of the run; its files go to `<dir>/<name>/`.", &Config::run,
                      &RunConfig::name);
  name.check = check_plain_name;
  s.push_back(name);
  KeyDef dir = field("run", "dir", VK::string,
                     "Directory that holds run directories (relative to the working directory).",
                     &Config::run, &RunConfig::dir);
  dir.check = check_non_empty;
  s.push_back(dir);
  s.push_back(with_min(field("run", "seed", VK::integer,
                             "Seed of every random stream (init, data, sampling).", &Config::run,
                             &RunConfig::seed),
                       0));
  s.push_back(with_min(field("run", "iterations", VK::integer,
                             "Iterations of the job's main loop (the smoke job: rounds of "
                             "checked collectives).",
                             &Config::run, &RunConfig::iterations),
                       0));

  KeyDef preset = field("model", "preset", VK::choice,
                        "Model shape: `tiny` for tests, `qwen3-0.6b` and `llama-1b` for GPU "
                        "benchmarks.",
                        &Config::model, &ModelConfig::preset);
  preset.choices = {"tiny", "qwen3-0.6b", "llama-1b"};
  s.push_back(preset);
  s.push_back(choice("model", "precision",
                     "Compute precision: `bf16` (bf16 weights/activations, fp32 accumulation) or "
                     "`fp32` (everything fp32, for tests). The smoke job runs its collective "
                     "checks in this type.",
                     &Config::model, &ModelConfig::precision,
                     std::vector<std::string>{"bf16", "fp32"}));

  s.push_back(field("train", "gradient_accumulation_fusion", VK::boolean,
                    "Weight-gradient GEMMs accumulate straight into the fp32 gradient buffer "
                    "(beta = 1) instead of writing a separate tensor that is then added.",
                    &Config::train, &TrainConfig::gradient_accumulation_fusion));

  s.push_back(choice("comm", "backend",
                     "Collectives backend: `nccl` (GPU builds), `mpi` (CPU builds, host "
                     "buffers) or `auto` (the one this build supports).",
                     &Config::comm, &CommConfig::backend,
                     std::vector<std::string>{"auto", "nccl", "mpi"}));
  s.push_back(with_min(field("comm", "timeout_s", VK::real,
                             "Seconds a collective may take before the job is aborted as hung "
                             "(a dead or stuck peer).",
                             &Config::comm, &CommConfig::timeout_s),
                       0.0, /*exclusive=*/true));

  s.push_back(with_min(field("debug", "fail_rank", VK::integer,
                             "Fault injection: this rank raises a fatal error after start-up, "
                             "to test that the whole job stops. -1: off.",
                             &Config::debug, &DebugConfig::fail_rank),
                       -1));
  s.push_back(choice("debug", "fail_mode",
                     "How `fail_rank` fails: `error` (a fatal error) or `hang` (it stops taking "
                     "part in collectives; its peers must abort after `comm.timeout_s`).",
                     &Config::debug, &DebugConfig::fail_mode,
                     std::vector<std::string>{"error", "hang"}));
  return s;
}

}  // namespace

const std::vector<KeyDef>& config_schema() {
  static const std::vector<KeyDef> schema = build_schema();
  return schema;
}

const KeyDef* find_key(const std::string& section, const std::string& key) {
  for (const auto& d : config_schema())
    if (d.section == section && d.key == key) return &d;
  return nullptr;
}

const char* kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::boolean: return "boolean";
    case ValueKind::integer: return "integer";
    case ValueKind::real: return "float";
    case ValueKind::string: return "string";
    case ValueKind::choice: return "enum";
  }
  return "?";
}

std::string to_toml_literal(const ConfigValue& value) {
  std::ostringstream os;
  if (auto b = std::get_if<bool>(&value)) {
    os << (*b ? "true" : "false");
  } else if (auto i = std::get_if<std::int64_t>(&value)) {
    os << *i;
  } else if (auto d = std::get_if<double>(&value)) {
    os << toml::value<double>(*d);
  } else {
    // Basic (double-quoted) TOML string, escaped, so every reader and message looks alike.
    os << '"';
    for (unsigned char ch : std::get<std::string>(value)) {
      if (ch == '"' || ch == '\\') {
        os << '\\' << ch;
      } else if (ch < 0x20 || ch == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        os << buf;
      } else {
        os << ch;
      }
    }
    os << '"';
  }
  return os.str();
}

BuildInfo this_build() {
  BuildInfo b;
#if defined(SHARDRL_ENABLE_CUDA)
  b.has_cuda = true;
#endif
  return b;
}

}  // namespace shardrl
