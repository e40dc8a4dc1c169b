#include "app/report_command.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "app/checkpoint_audit.hpp"
#include "app/job_config.hpp"
#include "config/changes.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/version.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/metrics_log.hpp"
#include "io/text_file.hpp"
#include "job/checkpoint_format.hpp"
#include "job/job_checkpoint.hpp"
#include "mpi/session.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;
using Record = std::vector<std::pair<std::string, double>>;

std::string number(double v) {
  if (!std::isfinite(v)) return "-";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{:.4g}", v);
}

// The values of one field over the records that have it, with their iterations: the finite ones,
// or all of them (a null, a non-finite value, read as NaN).
std::vector<std::pair<double, double>> series(const std::vector<Record>& records, const std::string& field,
                                              bool finite_only = true) {
  std::vector<std::pair<double, double>> out;
  for (const auto& r : records)
    for (const auto& [k, v] : r)
      if (k == field && (std::isfinite(v) || !finite_only)) out.emplace_back(r.front().second, v);
  return out;
}

// A value of the progress table: a null (non-finite) one said as such, not left out.
std::string value_text(double v) { return std::isfinite(v) ? number(v) : "null"; }

// A Markdown table cell's text: a `|` ends a cell even inside backticks.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// A path as a Markdown link's target: where it holds a space or a bracket, in angle brackets,
// which CommonMark allows to hold them (a bare target ends at the first space), with the angle
// brackets inside escaped.
std::string link_target(const std::string& path) {
  if (path.find_first_of(" ()<>") == std::string::npos) return path;
  std::string out = "<";
  for (char c : path) out += c == '<' || c == '>' ? std::string("\\") + c : std::string(1, c);
  return out + ">";
}

std::string config_section(const fs::path& run) {
  const fs::path path = run / "config.toml";
  const LoadedConfig loaded = parse_saved_config(read_input_file(path, "run config"), path.string());
  if (!loaded.ok()) {
    std::string errors;
    for (const auto& e : loaded.errors) errors += "\n- " + e;
    return "## Configuration\n\n`config.toml` does not load:" + errors + "\n\n";
  }
  std::string out = "## Configuration\n\nWhat `config.toml` sets differently from the defaults:\n\n"
                    "| key | this run | default |\n| --- | --- | --- |\n";
  const std::vector<ConfigChange> changes = config_changes(Config{}, loaded.config);
  for (const auto& c : changes) out += fmt::format("| `{}` | `{}` | `{}` |\n", c.key, cell(c.after), cell(c.before));
  if (changes.empty()) out += "| (none) | | |\n";
  return out + "\n";
}

// The records of iterations: those with an iteration's fields (a final evaluation's record, at
// the iteration count, has only its evaluation's).
std::vector<Record> iteration_records(const std::vector<Record>& records) {
  std::vector<Record> out;
  for (const auto& r : records)
    if (std::any_of(r.begin(), r.end(), [](const auto& field) { return field.first == "rollout_s"; }))
      out.push_back(r);
  return out;
}

std::string progress_section(const std::vector<Record>& records) {
  if (records.empty()) return "## Progress\n\nNo iteration recorded yet (`metrics.jsonl` is empty or absent).\n\n";
  const std::vector<Record> iterations = iteration_records(records);
  const std::size_t final_eval = records.size() - iterations.size();
  std::string out = "## Progress\n\n";
  if (!iterations.empty())
    out += fmt::format("{} iteration(s), {} to {}", iterations.size(), number(iterations.front().front().second),
                       number(iterations.back().front().second));
  if (final_eval > 0) out += fmt::format("{}a final evaluation", iterations.empty() ? "" : ", and ");
  // Iterations as metrics.jsonl numbers them; an evaluation's fields in an iteration's record
  // were measured before that iteration's rollout.
  out += ".\n\nIterations are numbered from 0 as in `metrics.jsonl` (the progress lines count from 1); an "
         "`eval/` value at iteration i was measured before iteration i.\n\n"
         "| metric | first | last | best | at iteration |\n| --- | --- | --- | --- | --- |\n";
  // Higher is better for these; the curves show the rest.
  std::vector<std::string> fields = {"reward_mean", "pass_rate"};
  for (const auto& r : records)
    for (const auto& [k, v] : r)
      if (k.rfind("eval/", 0) == 0 && std::find(fields.begin(), fields.end(), k) == fields.end()) fields.push_back(k);
  for (const std::string& f : fields) {
    const auto all = series(records, f, /*finite_only=*/false), s = series(records, f);
    if (all.empty()) continue;
    // First and last as recorded (a diverged run's last value is null, not its last finite one).
    std::string best = "null | ";
    if (!s.empty()) {
      const auto at = std::max_element(s.begin(), s.end(), [](auto a, auto b) { return a.second < b.second; });
      best = fmt::format("{} | {}", number(at->second), number(at->first));
    }
    out += fmt::format("| `{}` | {} | {} | {} |\n", f, value_text(all.front().second), value_text(all.back().second),
                       best);
  }
  out += "\n";
  // What a healthy-looking table would hide: steps skipped for non-finite gradients, and fields
  // recorded as null.
  const auto skipped = series(iterations, "skipped_steps");
  double skipped_total = 0, skipped_last = -1;
  std::size_t skipping = 0;
  for (const auto& [it, v] : skipped)
    if (v > 0) {
      skipped_total += v;
      skipped_last = it;
      ++skipping;
    }
  if (skipped_total > 0)
    out += fmt::format("**{} optimizer step(s) skipped** for non-finite gradients (`skipped_steps`), in {} "
                       "iteration(s), the last at iteration {}.\n\n",
                       number(skipped_total), skipping, number(skipped_last));
  std::vector<std::string> fields_seen;
  for (const auto& r : records)
    for (const auto& [k, v] : r)
      if (k != "iteration" && std::find(fields_seen.begin(), fields_seen.end(), k) == fields_seen.end())
        fields_seen.push_back(k);
  std::string nulls;
  for (const std::string& f : fields_seen) {
    const auto all = series(records, f, /*finite_only=*/false);
    std::size_t n = 0;
    double first = 0;
    for (const auto& [it, v] : all)
      if (!std::isfinite(v) && n++ == 0) first = it;
    if (n > 0) nulls += fmt::format("{}`{}` in {} record(s) from iteration {}", nulls.empty() ? "" : "; ", f, n,
                                    number(first));
  }
  if (!nulls.empty()) out += "**Non-finite values** (null in `metrics.jsonl`): " + nulls + ".\n\n";
  return out;
}

std::string throughput_section(const std::vector<Record>& records) {
  // The first iteration carries one-time costs (first launches, graph captures): left out of the
  // means when there are others. Evaluations (each one's seconds, in the record of the iteration
  // it came before, or the final one's) are averaged over all of them.
  const std::vector<Record> iterations = iteration_records(records);
  const std::vector<Record> steady(iterations.size() > 1 ? iterations.begin() + 1 : iterations.begin(),
                                   iterations.end());
  auto mean = [&](const std::vector<Record>& over, const std::string& field) {
    const auto s = series(over, field);
    double sum = 0;
    for (const auto& p : s) sum += p.second;
    return s.empty() ? NAN : sum / double(s.size());
  };
  std::string out = fmt::format("## Time per phase\n\nMeans over {} iteration(s){}.\n\n| phase | seconds per iteration | "
                                "tokens/s |\n| --- | --- | --- |\n",
                                steady.size(), iterations.size() > 1 ? ", the first left out" : "");
  out += fmt::format("| rollout | {} | {} |\n", number(mean(steady, "rollout_s")),
                     number(mean(steady, "rollout_tokens_per_s")));
  out += fmt::format("| train | {} | {} |\n", number(mean(steady, "train_s")),
                     number(mean(steady, "train_tokens_per_s")));
  if (const auto evals = series(records, "eval_s"); !evals.empty())
    out += fmt::format("| evaluation ({} of them) | {} | |\n", evals.size(), number(mean(records, "eval_s")));
  return out + "\n";
}

std::string checkpoints_section(const fs::path& run, MPI_Comm comm) {
  namespace f = checkpoint_format;
  std::string out = "## Checkpoints\n\n";
  const fs::path dir = run / "checkpoints";
  std::vector<fs::path> found;
  if (fs::is_directory(dir)) found = committed_checkpoints(dir);
  if (found.empty()) return out + "None in `checkpoints/`.\n\n";
  // The one a resume takes: what `latest` names, else (none) the newest committed file; a
  // `latest` that does not resolve stops a resume, said here rather than at the next start.
  fs::path latest;
  try {
    latest = latest_checkpoint(dir);
    if (latest.empty()) {
      latest = found.back();
      out += fmt::format("There is no `latest`: a resume takes the newest committed checkpoint, `{}`.\n\n",
                         latest.filename().string());
    }
  } catch (const std::exception& e) {   // InputError, or the file system's own
    out += fmt::format("**`latest` is unusable**: {}. A resume stops there; `--resume-from` names a checkpoint.\n\n",
                       e.what());
  }
  out += "| checkpoint | iterations done | tensors | complete, checksums |\n| --- | --- | --- | --- |\n";
  for (const fs::path& p : found) {
    std::error_code ec;
    const bool resumed = !latest.empty() && fs::equivalent(p, latest, ec);
    const std::string shown = fmt::format("`{}`", p.filename().string());
    try {
      const auto opened = open_checkpoint(p.string(), comm);
      std::size_t tensors = 0;
      for (const std::string& name : opened->datasets()) tensors += f::is_tensor(name) ? 1 : 0;
      // The check inspect --verify makes: a checkpoint a resume refuses is not called good.
      const CheckpointAudit audit = audit_checkpoint(*opened, p.filename().string());
      const std::string state = audit.ok() ? "all verified" : fmt::format("**{}**", cell(audit_problems(audit)));
      out += fmt::format("| {}{} | {} | {} | {} |\n", shown,
                         !resumed ? "" : audit.ok() ? " (a resume starts here)" : " (a resume starts here, and stops)",
                         opened->read_int64(f::kIterationsDone), tensors, state);
    } catch (const InputError& e) {
      out += fmt::format("| {} | | | **unreadable**: {} |\n", shown, cell(e.what()));
    }
  }
  return out + "\n";
}

// scripts/plot_metrics.py's PNG beside the report; "" and the reason when it cannot be drawn.
// `text` as one word of a POSIX shell command line.
std::string shell_word(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The curves drawn beside the report `out` (report.md: report_curves.png; --out R.md: R_curves.png),
// and the link to them from it, or empty with the reason. Beside the report, not in the run: a
// report written elsewhere leaves a read-only or shared run directory as it is, and moves with
// its picture.
std::pair<std::string, std::string> draw_curves(const fs::path& run, const fs::path& out) {
  const char* env = std::getenv("SHARDRL_SCRIPTS");
  const fs::path script = fs::path(env ? env : SHARDRL_SCRIPTS_DIR) / "plot_metrics.py";
  if (!fs::exists(script)) return {"", fmt::format("{} not found (set SHARDRL_SCRIPTS)", script.string())};
  if (!fs::exists(run / "metrics.jsonl")) return {"", "no metrics.jsonl"};
  const fs::path png = out.parent_path() / (out.stem().string() + "_curves.png");
  const std::string cmd = fmt::format("python3 {} {} --out {} > /dev/null 2>&1", shell_word(script.string()),
                                      shell_word(run.string()), shell_word(png.string()));
  if (std::system(cmd.c_str()) != 0 || !fs::exists(png))
    return {"", fmt::format("`{}` failed", "python3 scripts/plot_metrics.py")};
  return {png.filename().string(), ""};   // the report's own directory
}

}  // namespace

int run_report(const ReportArgs& args) {
  MpiSession mpi(nullptr, nullptr);   // one process (cli.cpp refuses more)
  try {
    const fs::path run(args.run_dir);
    if (!fs::is_directory(run)) throw InputError(fmt::format("'{}' is not a run directory", args.run_dir));
    // The report replaces an earlier report only: --out naming any other file (the run's
    // metrics.jsonl, its config.toml) is refused before anything is read.
    const fs::path out = args.out.empty() ? run / "report.md" : fs::path(args.out);
    if (fs::exists(out)) {
      std::ifstream existing(out);
      std::string first;
      std::getline(existing, first);
      if (fs::is_directory(out) || first.rfind("# Run report: ", 0) != 0)
        throw InputError(fmt::format("--out: '{}' exists and is not an earlier report; remove it or write the "
                                     "report elsewhere",
                                     out.string()));
    }
    std::vector<Record> records;
    if (fs::exists(run / "metrics.jsonl")) records = read_metrics(run / "metrics.jsonl");
    std::string md = fmt::format("# Run report: `{}`\n\nWritten by `shardrl report` ({}).\n\n", run.string(), kVersion);
    md += config_section(run);
    md += progress_section(records);
    const auto [png, why] = draw_curves(run, out);
    md += "## Curves\n\n" + (png.empty() ? "Not drawn: " + why + ".\n\n"
                                          : fmt::format("![reward, loss and throughput]({})\n\n", link_target(png)));
    md += throughput_section(records);
    md += checkpoints_section(run, mpi.world());
    write_text_atomically(out, md);
    std::cout << out.string() << "\n";
  } catch (const InputError& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const fs::filesystem_error& e) {   // a run directory it may not read: its problem, named
    print_error(e.what());
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace shardrl
