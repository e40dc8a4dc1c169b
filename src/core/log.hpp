// Logging through spdlog. Rank 0 logs at info level; the other ranks log only warnings and
// errors unless all ranks are asked to log. Colour only when stdout is a terminal.
// A log call never waits for stdout: lines go through a bounded queue to a writer thread, and a
// stdout that nobody reads (a launcher that stopped forwarding, a full pipe) costs the oldest
// queued lines, not a blocked rank. At exit, and before a fatal error ends the job, the queue gets
// kLogFlushDeadline to reach stdout; past it the process ends without the rest.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <string_view>

namespace shardrl {

// Installs the process-wide logger. Safe to call again (e.g. once the rank is known); lines
// logged before a second call still arrive, in order.
void init_logging(int rank, bool all_ranks);

// How long an exit or an abort waits for queued lines to reach stdout: a healthy stdout takes a
// full queue in milliseconds, and a stalled one would hold the process forever.
inline constexpr std::chrono::milliseconds kLogFlushDeadline{2000};

// Waits until every line logged before the call has been written to stdout, at most `deadline`.
// True when they were (or when init_logging never ran: nothing is queued); false when stdout did
// not take them in time.
bool flush_logging(std::chrono::milliseconds deadline = kLogFlushDeadline);

// Writes `text` to stdout as it is (no pattern, no newline added) through the log's queue, so it
// lands after the lines logged before it and never waits for stdout either: a progress bar's
// redraws. Before init_logging, straight to stdout.
void log_unformatted(std::string_view text);

}  // namespace shardrl
