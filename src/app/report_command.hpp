// `shardrl report RUN_DIR`: a one-page Markdown summary of a run, written beside it
// (RUN_DIR/report.md): the config's differences from the defaults, the iterations and how the
// reward and evaluation went, the curves (scripts/plot_metrics.py's PNG), time and throughput per
// phase, and the checkpoints present, each verified against its checksums.
#pragma once

#include "app/cli.hpp"

namespace shardrl {

int run_report(const ReportArgs& args);

}  // namespace shardrl
