// A user's reward function as a long-lived child process speaking JSON lines (rl.reward =
// "command"): one request object per line on its stdin, one {"reward": <finite number>} per line
// on its stdout, in order. Any failure of the process or of a reply is an InputError naming the
// command, the problem and the request; the process never outlives its owner and is always reaped.
//
// Protocol, per completion of a batch (one rollout's completions of this rank):
//   request  {"prompt": str, "completion": str, "answer": str, "metadata": {...}}   (a line)
//   reply    {"reward": number, "pass": bool, ...}   the reply ends with '\n'; extra keys are
//            ignored; "pass" is optional: whether the completion counts as a pass for pass_rate,
//            pass@1 and pass@k (without it, a reward of exactly 1 passes)
// The whole batch is written while replies are read (a script may answer each line before it
// reads the next one: neither side's pipe can deadlock the other). The command's stderr goes to
// the job's log, line by line, as warnings "reward command: <line>". The child starts in a
// process group of its own with stdin, stdout and stderr only. Not thread-safe: one caller.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rl/scored.hpp"

namespace shardrl {

struct RewardRequest {
  std::string prompt, completion, answer;
  nlohmann::json metadata = nlohmann::json::object();
  std::string source;   // where the example is written ("data/train.jsonl:7"), for messages; not sent
};

class RewardCommand {
 public:
  // Starts the command: argv[0] is looked up in PATH (unless it contains a '/'). `timeout_s` is
  // the time allowed for one whole batch. InputError if argv is empty, the timeout is not
  // positive, or the command cannot be started (not found, not executable).
  RewardCommand(std::vector<std::string> argv, double timeout_s);
  // Ends the process: closes its stdin, waits a grace period, then SIGTERM, then SIGKILL to its
  // process group, which also ends what it started and left running; reaps it. Never throws.
  ~RewardCommand();
  RewardCommand(RewardCommand&&) noexcept;
  RewardCommand& operator=(RewardCommand&&) noexcept;
  RewardCommand(const RewardCommand&) = delete;
  RewardCommand& operator=(const RewardCommand&) = delete;

  // One reward per request, in order, with its pass (the reply's "pass", else reward == 1).
  // InputError on a crash, a reply that is not JSON, has no finite numeric "reward" or a "pass"
  // that is not a boolean, extra output, or the timeout. After a failure the process is out
  // of step with us, so every later call fails with the same error.
  std::vector<Scored> score(const std::vector<RewardRequest>& batch);
  // A check asked at least every kGiveUpPollMs while a batch waits for the command: when it
  // holds, the batch fails at once with an InputError saying so (a job stop that leaves no time
  // to wait for a command that lives on through it). Empty: never.
  void give_up_when(std::function<bool()> check) { give_up_ = std::move(check); }
  static constexpr int kGiveUpPollMs = 100;

  // InputError when the command has ended within `settle_s` of its start (a script not found, a
  // syntax error, a failed import): said before the job spends compute on a warm-up and a
  // rollout that the first batch would then fail. Returns at once once it has run that long.
  void check_started(double settle_s);

  // The command as the messages quote it, e.g. `python3 my_reward.py`.
  const std::string& command_line() const { return command_line_; }

 private:
  class Process;   // the child, its pipes and the thread forwarding its stderr

  std::string command_line_;
  double timeout_s_ = 0;
  std::unique_ptr<Process> process_;
  std::string failure_;   // the first error; non-empty once the process is out of step
  std::function<bool()> give_up_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace shardrl
