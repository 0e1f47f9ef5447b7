#include "backends/cuda/nvrtc_compile.h"

#include <chrono>
#include <map>
#include <sstream>

#include "backends/cuda/cuda_support.h"
#include "backends/cuda/kernel_headers.h"

#ifndef KILN_CUDA_INCLUDE_DIR
#define KILN_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

namespace kiln::cuda {

namespace {

// Source lines near `line` (1-based), numbered, for error messages.
std::string excerpt(const std::string& source, int line) {
  std::istringstream in(source);
  std::ostringstream out;
  std::string text;
  for (int n = 1; std::getline(in, text); ++n)
    if (n >= line - 3 && n <= line + 3) out << n << ": " << text << "\n";
  return out.str();
}

struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

}  // namespace

const std::string& kernel_header(const std::string& name) {
  static const std::string none;
  static const std::map<std::string, std::string, std::less<>> by_name = [] {
    std::map<std::string, std::string, std::less<>> m;
    for (const KernelHeader& h : kernel_headers()) m.emplace(h.name, h.text);
    return m;
  }();
  auto it = by_name.find(name);
  return it == by_name.end() ? none : it->second;
}

Expected<CompiledModule> compile_cuda_source(const std::string& source, const std::string& arch,
                                             const std::string& name,
                                             const std::vector<std::string>& name_expressions) {
  const auto t0 = std::chrono::steady_clock::now();
  Program prog;
  std::vector<const char*> header_texts, header_names;
  for (const KernelHeader& h : kernel_headers()) {
    header_texts.push_back(h.text);
    header_names.push_back(h.name);
  }
  KILN_TRY(nvrtc_status(nvrtcCreateProgram(&prog.p, source.c_str(), name.c_str(), static_cast<int>(header_texts.size()),
                                           header_texts.data(), header_names.data()),
                        "nvrtcCreateProgram"));
  for (const std::string& e : name_expressions)
    KILN_TRY(nvrtc_status(nvrtcAddNameExpression(prog.p, e.c_str()), "nvrtcAddNameExpression"));
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const std::string include_opt = std::string("--include-path=") + KILN_CUDA_INCLUDE_DIR;
  // --split-compile=0: NVVM and ptxas optimize the kernels on every core of the host.
  const char* opts[] = {arch_opt.c_str(), "--std=c++17",     include_opt.c_str(),
                        "--fmad=true",    "-default-device", "--split-compile=0"};
  const nvrtcResult r = nvrtcCompileProgram(prog.p, static_cast<int>(std::size(opts)), opts);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog.p, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(prog.p, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  if (r != NVRTC_SUCCESS) {
    // The log names "<name>(LINE): error ..."; show the source around the first error.
    std::string context;
    const std::string key = name + "(";
    if (size_t at = log.find(key); at != std::string::npos)
      context = excerpt(source, std::atoi(log.c_str() + at + key.size()));
    return internal_error("NVRTC could not compile generated kernels for " + arch + ": " + nvrtcGetErrorString(r) +
                          "\n" + log + (context.empty() ? "" : "\n" + context));
  }
  size_t size = 0;
  KILN_TRY(nvrtc_status(nvrtcGetCUBINSize(prog.p, &size), "nvrtcGetCUBINSize"));
  CompiledModule m;
  m.cubin.resize(size);
  KILN_TRY(nvrtc_status(nvrtcGetCUBIN(prog.p, reinterpret_cast<char*>(m.cubin.data())), "nvrtcGetCUBIN"));
  for (const std::string& e : name_expressions) {
    const char* lowered = nullptr;
    KILN_TRY(nvrtc_status(nvrtcGetLoweredName(prog.p, e.c_str(), &lowered), "nvrtcGetLoweredName"));
    m.lowered_names.emplace_back(lowered);
  }
  m.log = std::move(log);
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace kiln::cuda
