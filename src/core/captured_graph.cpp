#include "core/captured_graph.hpp"

#include "core/error.hpp"

#if defined(SHARDRL_ENABLE_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.hpp"
#endif

namespace shardrl {

#if defined(SHARDRL_ENABLE_CUDA)
bool CapturedGraph::native() { return true; }

CapturedGraph::~CapturedGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CapturedGraph::capture(StreamHandle stream, std::function<void()> body) {
  SHARDRL_CHECK(!captured_, "a CapturedGraph is captured once");
  auto s = static_cast<cudaStream_t>(stream);
  SHARDRL_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  body();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (ended != cudaSuccess || graph == nullptr)
    fatal(std::string("CUDA graph capture failed (") + cudaGetErrorName(ended) + ": " + cudaGetErrorString(ended) +
              "): the captured work synchronised with the host, allocated, or left a forked stream unjoined",
          __FILE__, __LINE__);
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  SHARDRL_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
  captured_ = true;
}

void CapturedGraph::replay(StreamHandle stream) {
  SHARDRL_CHECK(captured_, "replay of a graph never captured");
  SHARDRL_CHECK_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream)));
}
#else
bool CapturedGraph::native() { return false; }

CapturedGraph::~CapturedGraph() = default;

void CapturedGraph::capture(StreamHandle, std::function<void()> body) {
  SHARDRL_CHECK(!captured_, "a CapturedGraph is captured once");
  body_ = std::move(body);
  captured_ = true;
}

void CapturedGraph::replay(StreamHandle) {
  SHARDRL_CHECK(captured_, "replay of a graph never captured");
  body_();
}
#endif

}  // namespace shardrl
