#include "core/trace.hpp"

#include <fmt/format.h>

#include <chrono>

#include "core/kokkos.hpp"

#if defined(SHARDRL_ENABLE_CUDA)
#include <nvtx3/nvToolsExt.h>
#endif

namespace shardrl {
namespace {

struct Open {
  std::string name;
  double start_us;
};

// One recorder per process; spans are opened and closed by the thread that runs the job.
struct Recorder {
  bool on = false, fence = false;
  std::size_t capacity = 0;
  std::vector<Open> open;
  std::vector<TraceEvent> done;
  std::int64_t dropped = 0;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string span_name(const char* name, std::int64_t index) {
  return index >= 0 ? fmt::format("{} {}", name, index) : std::string(name);
}

}  // namespace

void Trace::enable(bool fence, std::size_t capacity) {
  Recorder& r = recorder();
  r.on = true;
  r.fence = fence;
  r.capacity = capacity;
  r.done.reserve(std::min<std::size_t>(capacity, 1 << 16));
}

bool Trace::enabled() { return recorder().on; }

std::vector<TraceEvent> Trace::take() {
  Recorder& r = recorder();
  std::vector<TraceEvent> out;
  out.swap(r.done);
  r.dropped = 0;
  return out;
}

std::int64_t Trace::dropped() { return recorder().dropped; }

TraceSpan::TraceSpan(const char* name, std::int64_t index) {
  Recorder& r = recorder();
#if defined(SHARDRL_ENABLE_CUDA)
  // The NVTX range's name on the stack: spans open in the train step and every decode step,
  // traced or not.
  char label[96];
  const char* text = name;
  if (index >= 0) {
    const auto end = fmt::format_to_n(label, sizeof label - 1, "{} {}", name, index).out;
    *end = '\0';
    text = label;
  }
  nvtxRangePushA(text);
  nvtx_ = true;
#endif
  if (!r.on) return;
  if (r.fence) Kokkos::fence();
  r.open.push_back(Open{span_name(name, index), now_us()});
  recorded_ = true;
}

TraceSpan::~TraceSpan() {
#if defined(SHARDRL_ENABLE_CUDA)
  if (nvtx_) nvtxRangePop();
#endif
  if (!recorded_) return;
  Recorder& r = recorder();
  if (r.fence) Kokkos::fence();
  Open o = std::move(r.open.back());
  r.open.pop_back();
  if (r.done.size() >= r.capacity) {
    ++r.dropped;
    return;
  }
  r.done.push_back(TraceEvent{std::move(o.name), o.start_us, now_us() - o.start_us, static_cast<int>(r.open.size())});
}

}  // namespace shardrl
