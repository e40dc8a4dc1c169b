// Fatal errors and the generic check macro. A fatal error on any rank prints rank, host, cause
// and file:line, then aborts the whole job (never just this rank, so no peer hangs).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace shardrl {

// Who this process is, for error messages. Set once the process layout is known.
void set_error_origin(int rank, std::string host);
int error_origin_rank();               // -1 before set_error_origin
const std::string& error_origin_host();

// How to take the whole job down. The MPI session installs MPI_Abort; before that (or in
// processes without MPI) the default exits this process.
using JobAbortFn = void (*)(int exit_code);
void set_job_abort(JobAbortFn abort_fn);

// Exit codes of the shardrl executable (documented in README.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFatal = 1;        // runtime failure: the job was aborted
inline constexpr int kExitUsage = 2;        // bad command line, configuration, data or checkpoint
inline constexpr int kExitStoppedBySignal = 3;   // SIGUSR1/SIGTERM: checkpoint saved, resubmit to continue

// "rank 1 (host node03)" or "rank ? (host node03)" before the layout is known.
std::string origin_string();

// Prints "shardrl: <message>" to stderr in one write, after the lines logged before and stdout:
// a command's error for the user (bad input), whole however the rank's log lines interleave.
void print_error(std::string_view message);

// Prints "shardrl: fatal error on rank R (host H): <what>" to stderr in one write, after the
// lines logged before (within flush_logging's deadline) and stdout: the message of every path
// that ends the job. No MPI: safe from any thread.
void print_fatal(std::string_view what);

// Prints "shardrl: fatal error on rank R (host H): <what> [file:line]" to stderr, flushes,
// and aborts the job with kExitFatal.
[[noreturn]] void fatal(std::string_view what, const char* file, int line);

// At most `max_bytes` of `text` for an error message, bytes outside printable ASCII escaped
// (\xNN) and "..." added when cut: a message quotes user data, never copies it (a 50 MB file, a
// binary one, /etc/passwd behind a link).
std::string excerpt(std::string_view text, std::size_t max_bytes = 64);

// An error that the caller can report and recover from (bad input found by validation).
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shardrl

#define SHARDRL_FATAL(msg) ::shardrl::fatal((msg), __FILE__, __LINE__)

// An internal invariant: failing it is a bug or an unusable machine, never bad user input.
#define SHARDRL_CHECK(cond, msg)                                                     \
  do {                                                                               \
    if (!(cond)) ::shardrl::fatal(std::string("check failed: " #cond ": ") + (msg), \
                                  __FILE__, __LINE__);                               \
  } while (0)
