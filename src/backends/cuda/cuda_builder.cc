#include "backends/cuda/cuda_builder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "backends/cuda/nvrtc_compile.h"
#include "base/sha256.h"
#include "engine/fuse_elementwise.h"
#include "ir/sym_solve.h"
#include "kiln/settings.h"

namespace kiln::cuda {

namespace {

constexpr int64_t kAlign = 256;

int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

std::vector<int64_t> contiguous_strides_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) st[d - 1] = st[d] * std::max<int64_t>(sizes[d], 1);
  return st;
}

int64_t nbytes_of(DType t, const std::vector<int64_t>& sizes) {
  int64_t n = static_cast<int64_t>(dtype_size(t));
  for (int64_t s : sizes) n *= s;
  return n;
}

// Random device data for timing (never zeros: some kernels take shortcuts on them).
Status fill_random(void* p, size_t nbytes, uint32_t seed) {
  // One MiB of random values made on the host, repeated over the rest by
  // copies on the device (doubling): a range's arena of hundreds of MB took
  // seconds to fill from the host.
  constexpr size_t kBlock = size_t{1} << 20;
  const size_t bytes = nbytes & ~size_t{1};
  const size_t first = std::min(bytes, kBlock);
  std::vector<uint16_t> host(first / 2);
  std::mt19937 rng(seed);
  // Small values in every 16-bit float format and harmless as float32 halves.
  for (auto& h : host) h = static_cast<uint16_t>(0x3000 + (rng() & 0x07ff));
  KILN_CUDA_TRY(cudaMemcpy(p, host.data(), first, cudaMemcpyHostToDevice));
  auto* base = static_cast<uint8_t*>(p);
  for (size_t done = first; done < bytes;) {
    const size_t n = std::min(done, bytes - done);
    KILN_CUDA_TRY(cudaMemcpy(base + done, base, n, cudaMemcpyDeviceToDevice));
    done += n;
  }
  return Status::ok();
}

}  // namespace

DType Builder::compute_dtype(DType t) const {
  if (t != DType::Float32) return t;
  if (config_.precision == Precision::kFp16) return DType::Float16;
  if (config_.precision == Precision::kBf16) return DType::BFloat16;
  return t;
}

bool Builder::is_constant(const ir::Value* v) const {
  const auto& ins = net_.graph.inputs();
  for (size_t i = net_.num_inputs; i < ins.size(); ++i)
    if (ins[i] == v) return true;
  return false;
}

Expected<TRef> Builder::ref(const ir::Value* v) {
  if (static_cast<size_t>(v->id) < refs_.size() && refs_[static_cast<size_t>(v->id)]) {
    const TRef& r = *refs_[static_cast<size_t>(v->id)];
    touch(r);
    return r;
  }
  if (is_constant(v)) return constant(v, compute_dtype(v->type.dtype));
  return internal_error("value %" + v->name + " has no device tensor yet");
}

void Builder::bind(const ir::Value* v, TRef r) {
  if (refs_.size() <= static_cast<size_t>(v->id)) refs_.resize(static_cast<size_t>(v->id) + 1);
  refs_[static_cast<size_t>(v->id)] = std::move(r);
}

TRef Builder::new_tensor(DType dtype, const std::vector<int64_t>& sizes, bool channels_last) {
  Alloc a;
  a.bytes = std::max<int64_t>(nbytes_of(dtype, sizes), 1);
  a.first = a.last = static_cast<int>(plan_.steps.size());
  allocs_.push_back(a);
  TRef t;
  t.buf = {-2 - static_cast<int>(allocs_.size() - 1), 0};
  t.dtype = dtype;
  t.sizes = sizes;
  if (channels_last && sizes.size() == 4) {
    const int64_t C = sizes[1], H = sizes[2], W = sizes[3];
    t.strides = {H * W * C, 1, W * C, C};
  } else {
    t.strides = contiguous_strides_of(sizes);
  }
  return t;
}

void Builder::touch(const TRef& t) {
  const int a = t.alloc();
  if (a < 0) return;
  Alloc& al = allocs_[static_cast<size_t>(a)];
  al.last = std::max(al.last, static_cast<int>(plan_.steps.size()));
}

Status Builder::launch(const std::string& layer, GeneratedKernel k, const std::vector<BufferRef>& args) {
  for (const BufferRef& r : args)
    if (r.region <= -2) {
      Alloc& al = allocs_[static_cast<size_t>(-2 - r.region)];
      al.last = std::max(al.last, static_cast<int>(plan_.steps.size()));
    }
  // Which sizes the kernel reads at run time; one compiled kernel per key.
  std::vector<bool> runtime(std::min(k.dims.size(), kMaxKernelDims), config_.sizes_at_run_time);
  auto [it, inserted] = kernel_index_.try_emplace(kernel_key({k, runtime}), static_cast<int>(kernels_.size()));
  if (inserted) kernels_.emplace_back(k, runtime);
  Step s;
  s.kind = Step::Kind::kKernel;
  s.layer = layer;
  s.kernel.kernel = it->second;
  s.kernel.grid = k.grid;
  s.kernel.block = k.block;
  s.kernel.shared_bytes = k.shared_bytes;
  s.kernel.args = args;
  if (std::find(runtime.begin(), runtime.end(), true) != runtime.end()) s.kernel.dims = std::move(k.dims);
  plan_.steps.push_back(std::move(s));
  return Status::ok();
}

void Builder::add_step(Step s, std::initializer_list<const TRef*> uses) {
  for (const TRef* t : uses) touch(*t);
  plan_.steps.push_back(std::move(s));
}

void Builder::add_gemm(const std::string& layer, const GemmLaunch& g, std::initializer_list<const TRef*> uses) {
  Step s;
  s.kind = Step::Kind::kGemm;
  s.layer = layer;
  s.gemm = g;
  add_step(std::move(s), uses);
}

void Builder::add_conv(const std::string& layer, const ConvLaunch& c, std::initializer_list<const TRef*> uses) {
  Step s;
  s.kind = Step::Kind::kConv;
  s.layer = layer;
  s.conv = c;
  add_step(std::move(s), uses);
}

Expected<TRef> Builder::copied(const TRef& t, TRef out, const std::string& layer) {
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, copy_kernel(out.layout(), t.layout()));
  touch(t);
  KILN_TRY(launch(layer, std::move(k), {out.buf, t.buf}));
  return out;
}

Expected<TRef> Builder::contiguous(const TRef& t, const std::string& layer, std::optional<DType> to) {
  const DType want = to.value_or(t.dtype);
  if (t.contiguous() && want == t.dtype) return t;
  return copied(t, new_tensor(want, t.sizes), layer);
}

Expected<TRef> Builder::aligned(const TRef& t, const std::string& layer, int64_t bytes) {
  if (t.buf.offset % bytes == 0) return t;
  return copied(t, new_tensor(t.dtype, t.sizes), layer + " align");
}

Expected<TRef> Builder::channels_last(const TRef& t, const std::string& layer) {
  if (t.sizes.size() != 4) return internal_error("channels-last needs a 4-D tensor");
  TRef out = new_tensor(t.dtype, t.sizes, true);
  if (out.strides == t.strides) return t;
  return copied(t, std::move(out), layer);
}

Expected<TRef> Builder::constant(const ir::Value* v, DType dtype, bool channels_last_filter, bool transposed_matrix,
                                 int64_t pad_channels) {
  const auto& ins = net_.graph.inputs();
  std::string name;
  for (size_t i = net_.num_inputs; i < ins.size(); ++i)
    if (ins[i] == v) name = net_.constant_names[i - net_.num_inputs];
  if (name.empty()) return internal_error("%" + v->name + " is not a constant of the engine");
  std::vector<int64_t> sizes;
  for (const ir::Dim& d : v->type.sizes) {
    if (!d.is_static()) return unsupported("constant %" + v->name + " has a symbolic size");
    sizes.push_back(d.value);
  }
  const bool cl = channels_last_filter && sizes.size() == 4;
  const bool tr = transposed_matrix && sizes.size() == 2 && !cl;
  const int64_t pad = cl && pad_channels > sizes[1] ? pad_channels : 0;
  auto key = std::make_tuple(name, dtype, cl, tr, pad);
  auto [it, inserted] = constant_index_.try_emplace(key, static_cast<int>(plan_.constants.size()));
  if (inserted) plan_.constants.push_back({name, dtype, sizes, cl, tr, pad});
  TRef t;
  t.buf = {it->second, 0};
  t.dtype = dtype;
  t.sizes = sizes;
  if (pad) t.sizes[1] = pad;
  if (cl) {
    const int64_t C = t.sizes[1], R = sizes[2], S = sizes[3];
    t.strides = {R * S * C, 1, S * C, C};
  } else if (tr) {
    t.strides = {1, sizes[0]};
  } else {
    t.strides = contiguous_strides_of(sizes);
  }
  return t;
}

Expected<std::pair<BufferRef, BufferRef>> Builder::fp8_rows_constant(const ir::Value* v) {
  KILN_ASSIGN_OR_RETURN(TRef t, constant(v, DType::UInt8, false, true));
  DeviceConstant& c = plan_.constants[static_cast<size_t>(t.buf.region)];
  if (c.sizes.size() != 2) return internal_error("FP8 rows of %" + v->name + ", which is not a matrix");
  c.fp8_rows = true;
  return std::pair{t.buf, BufferRef{t.buf.region, c.fp8_scales_offset()}};
}

int Builder::add_error_layer(const std::string& layer) {
  plan_.error_layers.push_back(layer);
  return static_cast<int>(plan_.error_layers.size());
}

Status Builder::plan_memory() {
  // The error word at offset 0, where every shape of a range plan keeps it;
  // the rest around it.
  for (size_t i = 0; i < allocs_.size(); ++i) allocs_[i].offset = static_cast<int>(i) == error_alloc_ ? 0 : -1;
  plan_.arena_bytes = std::max<int64_t>(engine::place_in_arena(allocs_, kAlign), kAlign);
  return Status::ok();
}

void Builder::resolve(BufferRef& r) const {
  if (r.region <= -2) {
    r.offset += allocs_[static_cast<size_t>(-2 - r.region)].offset;
    r.region = kArenaRegion;
  }
}

namespace {

// Compiles `kernels` into one module as kiln_k0, kiln_k1, ...: the plan's kernel names and cubin.
Status compile_kernel_list(const std::vector<KernelChoice>& kernels, const BuildConfig& config, CudaPlan& plan) {
  plan.kernel_names.clear();
  plan.cubin.clear();
  if (kernels.empty()) return Status::ok();
  std::vector<const KernelChoice*> all;
  for (size_t i = 0; i < kernels.size(); ++i) {
    all.push_back(&kernels[i]);
    plan.kernel_names.push_back("kiln_k" + std::to_string(i));
  }
  KILN_ASSIGN_OR_RETURN(CompiledModule m, compile_kernels(all, plan.kernel_names, config.device.arch()));
  if (config.progress)
    config.progress(std::to_string(kernels.size()) + " generated kernels compiled with NVRTC in " +
                    std::to_string(static_cast<int>(m.seconds * 1000)) + " ms");
  plan.cubin = std::move(m.cubin);
  return Status::ok();
}

}  // namespace

Expected<CompiledModule> compile_kernels(const std::vector<const KernelChoice*>& kernels,
                                         std::vector<std::string>& names, const std::string& arch) {
  if (kernels.size() != names.size()) return internal_error("a name for every kernel");
  std::string source = kernel_prelude();
  std::set<std::string> headers;
  std::vector<std::string> instances;
  std::vector<size_t> instance_of;
  std::string text;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const GeneratedKernel& k = kernels[i]->first;
    if (k.is_template()) {
      KILN_ASSIGN_OR_RETURN(std::string e, kernel_instance(k, kernels[i]->second));
      headers.insert(k.header);
      instances.push_back(std::move(e));
      instance_of.push_back(i);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(std::string def, kernel_definition(k, names[i], kernels[i]->second));
    text += def;
  }
  for (const std::string& h : headers) source += "#include \"" + h + "\"\n";
  source += text;
  KILN_ASSIGN_OR_RETURN(CompiledModule m, compile_cuda_source(source, arch, "kiln_engine.cu", instances));
  for (size_t j = 0; j < instance_of.size(); ++j) names[instance_of[j]] = m.lowered_names[j];
  return m;
}

std::string identity_digest(const GeneratedKernel& k) {
  const std::string id = k.identity();
  return content_digest(std::span(reinterpret_cast<const uint8_t*>(id.data()), id.size()));
}

std::string kernel_key(const std::string& identity, const std::vector<int64_t>& dims,
                       const std::vector<bool>& runtime) {
  std::string key = identity + "\n//";
  for (size_t i = 0; i < dims.size(); ++i)
    key += i < runtime.size() && runtime[i] ? " r" : " " + std::to_string(dims[i]);
  return content_digest(std::span(reinterpret_cast<const uint8_t*>(key.data()), key.size()));
}

std::string kernel_key(const KernelChoice& k) { return kernel_key(identity_digest(k.first), k.first.dims, k.second); }

Expected<bool> choose_algorithm(Step& st, cublasLtHandle_t lt, cudnnHandle_t dnn,
                                const std::map<std::string, int>& by_layer, TunedAlgos& tuned, size_t workspace_bytes) {
  bool fresh = false;
  if (st.kind == Step::Kind::kGemm) {
    GemmLaunch& g = st.gemm;
    Expected<GemmAlgo> a = tuned_once(tuned.gemms, g.shape.to_string(), [&] {
      fresh = true;
      return pick_gemm(lt, g.shape, std::min(workspace_bytes, kGemmWorkspaceBytes));
    });
    if (!a) return a.status().with_context("layer '" + st.layer + "' (" + g.shape.to_string() + ")");
    g.algo = *a;
  } else if (st.kind == Step::Kind::kConv) {
    ConvLaunch& c = st.conv;
    Expected<ConvAlgo> a = tuned_once(tuned.convs, c.shape.to_string(), [&] {
      fresh = true;
      auto it = by_layer.find(st.layer);
      return pick_conv(dnn, c.shape, it == by_layer.end() ? std::nullopt : std::optional<int>(it->second),
                       std::min(workspace_bytes, kConvWorkspaceBytes));
    });
    if (!a) return a.status().with_context("layer '" + st.layer + "' (" + c.shape.to_string() + ")");
    c.algo = *a;
  }
  return fresh;
}

namespace {

// compile_kernel_list and tune_plan side by side: NVRTC compiles on another
// thread (it needs no device) while the GEMMs and convolutions are timed on
// this one, then `more_timing` (a range's other timed shapes), if given.
// Progress is reported from this thread.
Status compile_and_tune(const std::vector<KernelChoice>& kernels, const BuildConfig& config, CudaPlan& plan,
                        const std::function<Status()>& more_timing = {}) {
  BuildConfig quiet = config;
  quiet.progress = nullptr;
  CudaPlan compiled;  // its kernel names and cubin
  const auto start = std::chrono::steady_clock::now();
  double compile_s = 0;
  std::future<Status> compiling = std::async(std::launch::async, [&] {
    Status st = compile_kernel_list(kernels, quiet, compiled);
    compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return st;
  });
  Status tuned = tune_plan(plan, config);
  if (tuned && more_timing) tuned = more_timing();
  Status built = compiling.get();
  KILN_TRY(built);
  KILN_TRY(tuned);
  if (config.progress && !kernels.empty())
    config.progress(std::to_string(kernels.size()) + " generated kernels compiled with NVRTC in " +
                    std::to_string(static_cast<int>(compile_s * 1000)) + " ms (beside the timing)");
  plan.kernel_names = std::move(compiled.kernel_names);
  plan.cubin = std::move(compiled.cubin);
  return Status::ok();
}

}  // namespace

Status tune_plan(CudaPlan& plan_, const BuildConfig& config_, int candidates, bool convs_only) {
  bool any = false;
  for (const Step& s : plan_.steps)
    any = any || (convs_only ? s.kind == Step::Kind::kConv : s.kind != Step::Kind::kKernel);
  if (!any) return Status::ok();
  const auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(DeviceBuffer arena, DeviceBuffer::allocate(static_cast<size_t>(plan_.arena_bytes)));
  KILN_TRY(fill_random(arena.get(), arena.nbytes(), 1));
  std::vector<DeviceBuffer> consts;
  for (size_t i = 0; i < plan_.constants.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::allocate(static_cast<size_t>(plan_.constants[i].nbytes())));
    KILN_TRY(fill_random(c.get(), c.nbytes(), static_cast<uint32_t>(i + 2)));
    consts.push_back(std::move(c));
  }
  const size_t ws_bytes = std::max(kGemmWorkspaceBytes, kConvWorkspaceBytes);
  KILN_ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::allocate(ws_bytes));
  auto ptr = [&](const BufferRef& r) -> void* {
    uint8_t* base = r.region == kArenaRegion ? arena.bytes() : consts[static_cast<size_t>(r.region)].bytes();
    return base + r.offset;
  };
  cudaStream_t stream = nullptr;
  KILN_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  Status status = cublas_status(cublasLtCreate(&lt), "cublasLtCreate");
  if (status) status = cudnn_status(cudnnCreate(&dnn), "cudnnCreate");
  if (status) status = cudnn_status(cudnnSetStream(dnn, stream), "cudnnSetStream");
  int gemms = 0, convs = 0;
  const bool trace = tuning_traced();
  TunedAlgos tuned;  // one timing per distinct shape
  for (Step& s : plan_.steps) {
    if (!status) break;
    if (s.kind == Step::Kind::kGemm && !convs_only) {
      GemmLaunch& g = s.gemm;
      auto algo = tuned_once(tuned.gemms, g.shape.to_string(), [&] {
        const auto t = std::chrono::steady_clock::now();
        auto a = tune_gemm(lt, g.shape, ptr(g.a), ptr(g.b), ptr(g.c), g.has_bias ? ptr(g.bias) : nullptr, ws.get(),
                           kGemmWorkspaceBytes, stream, candidates);
        if (trace)
          std::fprintf(stderr, "kiln: tuning %s: %.1f ms\n", g.shape.to_string().c_str(),
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
        return a;
      });
      if (!algo) {
        status = algo.status().with_context("layer '" + s.layer + "' (" + g.shape.to_string() + ")");
        break;
      }
      g.algo = *algo;
      ++gemms;
    } else if (s.kind == Step::Kind::kConv) {
      ConvLaunch& c = s.conv;
      auto algo = tuned_once(tuned.convs, c.shape.to_string(), [&] {
        return tune_conv(dnn, c.shape, ptr(c.x), ptr(c.w), c.shape.has_bias ? ptr(c.bias) : nullptr,
                         c.shape.has_residual ? ptr(c.z) : nullptr, ptr(c.y), ws.get(), kConvWorkspaceBytes, stream,
                         convs_only ? 2 : 0);
      });
      if (!algo) {
        status = algo.status().with_context("layer '" + s.layer + "' (" + c.shape.to_string() + ")");
        break;
      }
      c.algo = *algo;
      ++convs;
    }
  }
  if (dnn) cudnnDestroy(dnn);
  if (lt) cublasLtDestroy(lt);
  cudaStreamDestroy(stream);
  KILN_TRY(status);
  plan_.workspace_bytes = 0;
  for (const Step& s : plan_.steps) {
    if (s.kind == Step::Kind::kGemm)
      plan_.workspace_bytes = std::max(plan_.workspace_bytes, s.gemm.algo.workspace_bytes);
    if (s.kind == Step::Kind::kConv)
      plan_.workspace_bytes = std::max(plan_.workspace_bytes, s.conv.algo.workspace_bytes);
  }
  if (config_.progress)
    config_.progress("timed " + std::to_string(gemms) + " GEMMs (" + std::to_string(tuned.gemms.size()) +
                     " shapes) and " + std::to_string(convs) + " convolutions (" + std::to_string(tuned.convs.size()) +
                     " shapes) in " +
                     std::to_string(static_cast<int>(
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1000)) +
                     " ms");
  return Status::ok();
}

std::optional<TRef> Builder::input_slot(const ir::Value* v) const {
  if (v == nullptr || static_cast<size_t>(v->id) >= input_slots_.size()) return std::nullopt;
  return input_slots_[static_cast<size_t>(v->id)];
}

Expected<CudaPlan> Builder::build() {
  KILN_TRY(emit());
  KILN_TRY(compile_and_tune(kernels_, config_, plan_));
  KILN_TRY(plan_.validate());
  return std::move(plan_);
}

Status Builder::emit() {
  plan_.device_name = config_.device.name;
  plan_.arch = config_.device.arch();
  plan_.sm_count = config_.device.sm_count;
  plan_.precision = config_.precision;
  refs_.assign(net_.graph.num_values(), std::nullopt);
  input_slots_.assign(net_.graph.num_values(), std::nullopt);
  {
    Alloc err;
    err.bytes = 4;
    err.first = -1;
    err.last = INT_MAX;
    allocs_.push_back(err);
    error_alloc_ = 0;
  }
  // Engine inputs: contiguous slots the caller's tensors are copied into.
  for (size_t i = 0; i < net_.num_inputs; ++i) {
    const ir::Value* v = net_.graph.inputs()[i];
    if (v->kind == ir::ValueKind::kSymInt) {
      // A size computed outside the engine, given as an int64 0-d tensor: its
      // uses are numbers in a network specialized to its shape, so only a slot.
      TRef slot = new_tensor(DType::Int64, {});
      allocs_[static_cast<size_t>(slot.alloc())].first = -1;
      allocs_[static_cast<size_t>(slot.alloc())].last = INT_MAX;
      plan_.inputs.push_back({v->name, DType::Int64, {}, 0});
      input_slots_[static_cast<size_t>(v->id)] = slot;
      continue;
    }
    if (v->kind != ir::ValueKind::kTensor)
      return unsupported("engine input %" + v->name + " is a symbolic scalar other than an integer");
    std::vector<int64_t> sizes;
    for (const ir::Dim& d : v->type.sizes) {
      if (!d.is_static()) return unsupported("engine input %" + v->name + " has a symbolic size");
      sizes.push_back(d.value);
    }
    TRef slot = new_tensor(v->type.dtype, sizes);
    // Input slots keep their bytes for the whole run and between runs (the
    // engine may be replayed on inputs copied in once), so nothing reuses them.
    allocs_[static_cast<size_t>(slot.alloc())].first = -1;
    allocs_[static_cast<size_t>(slot.alloc())].last = INT_MAX;
    plan_.inputs.push_back({v->name, v->type.dtype, sizes, 0});
    bind(v, slot);
    input_slots_[static_cast<size_t>(v->id)] = slot;
    if (compute_dtype(v->type.dtype) != v->type.dtype) {
      KILN_ASSIGN_OR_RETURN(TRef cast, contiguous(slot, "input %" + v->name, compute_dtype(v->type.dtype)));
      bind(v, cast);
    }
  }
  for (const auto& n : net_.graph.nodes()) {
    KILN_TRY_CTX(emit_layer(*this, *n), n->describe());
    // Every layer's results have the sizes the graph declares (a .pt2's
    // tensor_meta, not trusted): later layers index the device tensors by the
    // ranks the capability checks read from those declared types.
    for (const ir::Value* v : n->outputs) {
      if (v->kind != ir::ValueKind::kTensor || static_cast<size_t>(v->id) >= refs_.size() ||
          !refs_[static_cast<size_t>(v->id)])
        continue;
      const std::vector<int64_t>& got = refs_[static_cast<size_t>(v->id)]->sizes;
      bool same = got.size() == v->type.sizes.size();
      for (size_t d = 0; same && d < got.size(); ++d)
        same = v->type.sizes[d].is_static() && v->type.sizes[d].value == got[d];
      if (!same)
        return invalid_argument(n->describe() + ": gives %" + v->name + " of " + shape_to_string(got) +
                                " where the graph declares " + v->type.to_string());
    }
  }
  // Engine outputs: each in its own contiguous slot of the IR dtype, live to the end.
  std::vector<int> used_as_output;
  for (const ir::Value* v : net_.graph.outputs()) {
    if (v->kind == ir::ValueKind::kSymInt) {
      // A size the engine gives back: its value at this shape, written by a kernel.
      std::optional<int64_t> value;
      if (v->sym)
        if (Expected<int64_t> x = v->sym->eval(bindings_)) value = *x;
      if (!value && v->producer && v->producer->op == ir::OpKind::kSymSize) {
        const ir::Value* t = v->producer->operands().empty() ? nullptr : v->producer->operands()[0];
        const ir::Arg* dim = v->producer->find("dim");
        const int64_t* d = dim ? std::get_if<int64_t>(dim) : nullptr;
        if (t && d) {
          const int64_t rank = static_cast<int64_t>(t->type.sizes.size());
          const int64_t k = *d < 0 ? *d + rank : *d;
          if (k >= 0 && k < rank && t->type.sizes[static_cast<size_t>(k)].is_static())
            value = t->type.sizes[static_cast<size_t>(k)].value;
        }
      }
      if (!value) return unsupported("engine output %" + v->name + " is a size the engine cannot tell");
      TRef out = new_tensor(DType::Int64, {});
      KILN_ASSIGN_OR_RETURN(GeneratedKernel k, scalar_fill_kernel(*value));
      KILN_TRY(launch("output %" + v->name, std::move(k), {out.buf}));
      allocs_[static_cast<size_t>(out.alloc())].last = INT_MAX;
      used_as_output.push_back(out.alloc());
      plan_.outputs.push_back({v->name, DType::Int64, {}, 0});
      plan_.outputs.back().offset = out.buf.region;  // resolved below
      continue;
    }
    KILN_ASSIGN_OR_RETURN(TRef r, ref(v));
    if (v->producer && v->producer->op == ir::OpKind::kCacheWrite) {
      // Written in place: the engine output is the cache's input slot itself (the plan's alias).
      const ir::Arg* self = v->producer->find("self");
      const auto* cache = self ? std::get_if<ir::Value*>(self) : nullptr;
      std::optional<TRef> slot = cache ? input_slot(*cache) : std::nullopt;
      if (!slot) return internal_error(v->producer->describe() + ": writes into something that is not an engine input");
      std::vector<int64_t> sizes;
      for (const ir::Dim& d : v->type.sizes) sizes.push_back(d.value);
      plan_.outputs.push_back({v->name, v->type.dtype, sizes, 0});
      plan_.outputs.back().offset = slot->buf.region;  // resolved below
      continue;
    }
    std::vector<int64_t> sizes;
    for (const ir::Dim& d : v->type.sizes) sizes.push_back(d.value);
    const int a = r.alloc();
    const bool reuse = a > 0 && r.buf.offset == 0 && r.contiguous() && r.dtype == v->type.dtype &&
                       allocs_[static_cast<size_t>(a)].first >= 0 &&
                       std::find(used_as_output.begin(), used_as_output.end(), a) == used_as_output.end() &&
                       nbytes_of(r.dtype, r.sizes) == allocs_[static_cast<size_t>(a)].bytes;
    TRef out = r;
    if (!reuse) {
      out = new_tensor(v->type.dtype, sizes);
      KILN_ASSIGN_OR_RETURN(GeneratedKernel k, copy_kernel(out.layout(), r.layout()));
      KILN_TRY(launch("output %" + v->name, std::move(k), {out.buf, r.buf}));
    }
    allocs_[static_cast<size_t>(out.alloc())].last = INT_MAX;
    used_as_output.push_back(out.alloc());
    plan_.outputs.push_back({v->name, v->type.dtype, sizes, 0});
    plan_.outputs.back().offset = out.buf.region;  // resolved below
  }
  KILN_TRY(plan_memory());
  {
    int next = 1;  // allocation 0 is the error word
    for (IoSlot& s : plan_.inputs) {
      // Each input made its slot allocation first; a cast (fp16/bf16) made one more afterwards.
      while (allocs_[static_cast<size_t>(next)].first != -1) ++next;
      s.offset = allocs_[static_cast<size_t>(next)].offset;
      ++next;
    }
    for (IoSlot& s : plan_.outputs) s.offset = allocs_[static_cast<size_t>(-2 - s.offset)].offset;
  }
  plan_.error_offset = allocs_[static_cast<size_t>(error_alloc_)].offset;
  for (Step& s : plan_.steps) {
    for (BufferRef& r : s.kernel.args) resolve(r);
    for (BufferRef* r : {&s.gemm.a, &s.gemm.b, &s.gemm.c, &s.gemm.bias}) resolve(*r);
    for (BufferRef* r : {&s.conv.x, &s.conv.w, &s.conv.bias, &s.conv.z, &s.conv.y}) resolve(*r);
  }
  int64_t unshared = 0;
  for (const Alloc& a : allocs_) unshared += align_up(a.bytes);
  if (config_.progress)
    config_.progress(std::to_string(plan_.steps.size()) + " steps, arena " + std::to_string(plan_.arena_bytes) +
                     " bytes (" + std::to_string(unshared) + " without reuse)");
  return Status::ok();
}

namespace {

// The size symbols of a network's values, sorted.
std::vector<std::string> network_symbols(const engine::Network& net) {
  std::set<std::string> names;
  auto note = [&](const ir::Value* v) {
    for (const ir::Dim& d : v->type.sizes)
      if (!d.is_static()) {
        std::vector<std::string> found;
        d.expr->collect_symbols(found);
        names.insert(found.begin(), found.end());
      }
  };
  for (const ir::Value* v : net.graph.inputs()) note(v);
  for (const auto& n : net.graph.nodes())
    for (const ir::Value* v : n->outputs) note(v);
  return {names.begin(), names.end()};
}

engine::Network clone_network(const engine::Network& net) {
  engine::Network c;
  c.graph = net.graph.clone();
  c.num_inputs = net.num_inputs;
  c.constant_names = net.constant_names;
  return c;  // no kernel choices: folds and fusion change the layers
}

// `net` specialized to `bindings` and emitted with every size its kernels read at run time.
Expected<ShapePlan> emit_shape(const engine::Network& net, const ir::SymBindings& bindings, const BuildConfig& config);

// A kernel launch's place in a plan: its layer, its kernel's identity (a digest), and
// which launch of that kernel by that layer it is. Shapes of one range may
// plan a layer differently (a GEMV kernel for one row, a library GEMM for
// more), so launches are paired across shapes by what they are, not by
// position.
using Site = std::tuple<std::string, std::string, size_t>;

// Gives each kernel step of `a` (emitted with every size read at run time)
// its kernel: the generated kernel with the sizes runtime_of(site, sizes)
// says it reads at run time, the others compiled in, found in `kernels` by
// key or added there; the step passes its sizes only when it reads any.
void assign_kernels(ShapePlan& a,
                    const std::function<std::vector<bool>(const Site&, const std::vector<int64_t>&)>& runtime_of,
                    std::vector<KernelChoice>& kernels, std::map<std::string, int>& index) {
  std::map<std::pair<std::string, std::string>, size_t> seen;  // launches of each (layer, kernel) so far
  for (Step& st : a.plan.steps) {
    if (st.kind != Step::Kind::kKernel) continue;
    const size_t k = static_cast<size_t>(st.kernel.kernel);
    const std::string& identity = a.identities.at(k);
    const size_t nth = seen[{st.layer, identity}]++;
    std::vector<bool> runtime = runtime_of({st.layer, identity, nth}, st.kernel.dims);
    runtime.resize(std::min(st.kernel.dims.size(), kMaxKernelDims), true);
    const bool any = std::find(runtime.begin(), runtime.end(), true) != runtime.end();
    auto [it, inserted] =
        index.try_emplace(kernel_key(identity, st.kernel.dims, runtime), static_cast<int>(kernels.size()));
    if (inserted) {
      GeneratedKernel g = a.kernels[k].first;
      g.dims = st.kernel.dims;
      kernels.push_back({std::move(g), std::move(runtime)});
    }
    st.kernel.kernel = it->second;
    if (!any) st.kernel.dims.clear();
  }
  a.kernels.clear();
  a.identities.clear();
}

// Every launch site of `plans` with the sizes it is given.
struct SiteSizes {
  std::vector<int64_t> first;  // the sizes of its first launch
  std::vector<bool> moves;     // per size: whether another launch gives another value
  size_t shapes = 0;           // at how many of the shapes it is launched
};
std::map<Site, SiteSizes> launch_sites(const std::vector<ShapePlan>& plans) {
  std::map<Site, SiteSizes> sites;
  for (const ShapePlan& a : plans) {
    std::map<std::pair<std::string, std::string>, size_t> seen;
    const std::vector<std::string>& identities = a.identities;
    for (const Step& st : a.plan.steps) {
      if (st.kind != Step::Kind::kKernel) continue;
      const size_t k = static_cast<size_t>(st.kernel.kernel);
      const size_t nth = seen[{st.layer, identities[k]}]++;
      auto [it, fresh] = sites.try_emplace({st.layer, identities[k], nth},
                                           SiteSizes{st.kernel.dims, std::vector<bool>(st.kernel.dims.size(), false)});
      auto& [first, moves, shapes] = it->second;
      ++shapes;
      if (first.size() != st.kernel.dims.size()) {
        moves.assign(moves.size(), true);
        continue;
      }
      for (size_t d = 0; d < first.size(); ++d) moves[d] = moves[d] || first[d] != st.kernel.dims[d];
    }
  }
  return sites;
}

// f(0) .. f(n - 1) on up to as many threads as the host has cores.
template <typename F>
void parallel_for(size_t n, F&& f) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) f(i);
  };
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(threads, n); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

// `shapes` emitted on up to as many threads as the host has cores.
Expected<std::vector<ShapePlan>> emit_shapes(const engine::Network& net, const std::vector<ir::SymBindings>& shapes,
                                             const BuildConfig& config) {
  std::vector<std::optional<Expected<ShapePlan>>> out(shapes.size());
  parallel_for(shapes.size(), [&](size_t i) { out[i].emplace(emit_shape(net, shapes[i], config)); });
  std::vector<ShapePlan> plans;
  plans.reserve(shapes.size());
  for (auto& p : out) {
    if (!*p) return p->status();
    plans.push_back(std::move(**p));
  }
  return plans;
}

// Every shape of `symbols`' ranges, in ShapeTable order (the last symbol fastest).
std::vector<ir::SymBindings> every_shape(const std::vector<PlanSymbol>& symbols) {
  std::vector<ir::SymBindings> out(1);
  for (const PlanSymbol& y : symbols) {
    std::vector<ir::SymBindings> grown;
    for (const ir::SymBindings& b : out)
      for (int64_t v = y.min; v <= y.max; ++v) {
        grown.push_back(b);
        grown.back()[y.name] = v;
      }
    out = std::move(grown);
  }
  return out;
}

// The convolutions of one shape of a range as timed at build: its size (the
// product of its symbols' values) and each layer's algorithm.
struct TimedShape {
  double size = 1;
  std::map<std::string, int> by_layer;
};

TimedShape timed_convs(const CudaPlan& p, std::span<const int64_t> values, TunedAlgos& seed) {
  TimedShape t;
  for (int64_t v : values) t.size *= static_cast<double>(v);
  for (const Step& st : p.steps)
    if (st.kind == Step::Kind::kConv) {
      seed.convs.emplace(st.conv.shape.to_string(), st.conv.algo);
      t.by_layer.emplace(st.layer, st.conv.algo.algo);
    }
  return t;
}

// The range's shapes at which convolutions are timed besides opt: every
// symbol at its min, and every symbol at its max (each timed briefly, among
// cuDNN's first few algorithms). A convolution of another shape runs the
// algorithm its layer was timed with at the nearest of these (by the
// product of the symbols, on a log scale), where cuDNN runs it: an algorithm
// timed at batch 16 ran a batch of 59 at 1.5-2x the time of one timed there.
Status time_range_ends(const CudaPlan& plan, const BuildConfig& config, TunedAlgos& seed,
                       std::vector<TimedShape>& timed) {
  std::vector<int64_t> opt;
  for (const PlanSymbol& y : plan.symbols) opt.push_back(y.opt);
  timed.push_back(timed_convs(plan, opt, seed));
  if (!plan.table || timed.back().by_layer.empty()) return Status::ok();
  for (int end = 0; end < 2; ++end) {
    std::vector<int64_t> values;
    for (const PlanSymbol& y : plan.symbols) values.push_back(end == 0 ? y.min : y.max);
    if (values == opt) continue;
    KILN_ASSIGN_OR_RETURN(CudaPlan p, plan.table->shape_plan(plan, ShapeTable::index(plan.symbols, values)));
    KILN_TRY(tune_plan(p, config, 8, /*convs_only=*/true));
    timed.push_back(timed_convs(p, values, seed));
  }
  return Status::ok();
}

// The GEMM and convolution algorithms of every shape in `plan`'s table
// other than those `plan` (tuned at opt) times: per distinct shape, a
// convolution the algorithm its layer was timed with at the nearest timed
// shape (`timed`, from time_range_ends, whose choices are in `seed`) where
// cuDNN runs it, else the first of the library's heuristic
// (choose_algorithm), nothing timed. Each shape's steps are read back from
// the table as a call will read them.
Status choose_table_algorithms(CudaPlan& plan, const BuildConfig& config, TunedAlgos seed,
                               const std::vector<TimedShape>& timed) {
  const auto start = std::chrono::steady_clock::now();
  for (const Step& st : plan.steps)
    if (st.kind == Step::Kind::kGemm) seed.gemms.emplace(st.gemm.shape.to_string(), st.gemm.algo);
  // The timed shape nearest shape `i`'s.
  auto nearest = [&](size_t i) -> const TimedShape& {
    double size = 1;
    for (int64_t v : ShapeTable::values(plan.symbols, i)) size *= static_cast<double>(v);
    size_t best = 0;
    for (size_t t = 1; t < timed.size(); ++t)
      if (std::abs(std::log(size / timed[t].size)) < std::abs(std::log(size / timed[best].size))) best = t;
    return timed[best];
  };
  auto table = std::make_shared<ShapeTable>(*plan.table);
  // The shapes in slices, one per thread, each with its own library handles
  // and what it chose; the library's heuristic gives a shape one answer, so
  // the slices' choices merge without conflict.
  const size_t shapes = table->starts.size();
  const size_t slices = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<TunedAlgos> chosen(slices, seed);
  std::vector<Status> failed(slices);
  parallel_for(slices, [&](size_t k) {
    cublasLtHandle_t lt = nullptr;
    cudnnHandle_t dnn = nullptr;
    Status status = cublas_status(cublasLtCreate(&lt), "cublasLtCreate");
    if (status) status = cudnn_status(cudnnCreate(&dnn), "cudnnCreate");
    for (size_t i = k; status && i < shapes; i += slices) {
      Expected<CudaPlan> p = table->shape_plan(plan, i);
      if (!p) {
        status = p.status();
        break;
      }
      const TimedShape& near = nearest(i);
      for (Step& st : p->steps) {
        if (st.kind == Step::Kind::kKernel) continue;
        Expected<bool> fresh = choose_algorithm(st, lt, dnn, near.by_layer, chosen[k], plan.workspace_bytes);
        if (!fresh) {
          status = fresh.status();
          break;
        }
      }
    }
    if (dnn) cudnnDestroy(dnn);
    if (lt) cublasLtDestroy(lt);
    failed[k] = std::move(status);
  });
  for (Status& st : failed) KILN_TRY(st);
  for (TunedAlgos& t : chosen) {
    table->gemm_algos.merge(t.gemms);
    table->conv_algos.merge(t.convs);
  }
  if (config.progress)
    config.progress("chose the library algorithms of " + std::to_string(shapes) + " shapes (" +
                    std::to_string(table->gemm_algos.size()) + " GEMM and " + std::to_string(table->conv_algos.size()) +
                    " convolution shapes) in " +
                    std::to_string(static_cast<int>(
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1000)) +
                    " ms");
  plan.table = std::move(table);
  return Status::ok();
}

// How many shapes a range may hold for its build to plan each of them (KILN_CUDA_SHAPE_TABLE, else 4096).
Expected<uint64_t> table_limit() {
  const std::string v = settings().cuda.shape_table;
  if (v.empty()) return uint64_t{4096};
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (*end || n > kMaxTableShapes || v[0] == '-')
    return invalid_argument("KILN_CUDA_SHAPE_TABLE=" + v + ": give a count of shapes from 0 to " +
                            std::to_string(kMaxTableShapes));
  return static_cast<uint64_t>(n);
}

}  // namespace

Expected<RangeBuild> plan_range(const engine::Network& net, const BuildConfig& config) {
  const std::vector<std::string> names = network_symbols(net);
  std::vector<PlanSymbol> symbols;
  std::set<std::string> given;  // symbols an engine input's size gives
  for (size_t i = 0; i < net.num_inputs; ++i)
    for (const ir::Dim& d : net.graph.inputs()[i]->type.sizes)
      if (!d.is_static())
        if (std::optional<std::string> s = ir::affine_symbol(*d.expr)) given.insert(*s);
  for (const std::string& n : names) {
    auto it = config.symbols.find(n);
    if (it == config.symbols.end() || it->second.max == INT64_MAX || it->second.max < it->second.min)
      return unsupported("size " + n + " has no finite range (give one with --shape)");
    if (!given.count(n)) return unsupported("size " + n + " is not the size of an engine input's dimension");
    const ir::SymbolRange& r = it->second;
    // Kernels are planned from 1 up: a call with an empty input (a count of
    // 0 from nonzero) makes its empty results on the host (Executable::run).
    const int64_t lo = std::max<int64_t>(r.min, 1);
    if (r.max < lo) return unsupported("size " + n + " can only be 0");
    const int64_t opt = r.opt >= lo && r.opt <= r.max ? r.opt : r.max;
    symbols.push_back({n, lo, opt, r.max});
  }
  KILN_ASSIGN_OR_RETURN(const uint64_t limit, table_limit());
  const bool table = ShapeTable::count(symbols) <= limit;
  // The shapes planned at build time: every symbol at opt, then every shape
  // of the range (a table), else the shapes at min and at max.
  std::vector<ir::SymBindings> shapes(1);
  for (const PlanSymbol& y : symbols) shapes[0][y.name] = y.opt;
  if (table) {
    for (ir::SymBindings& b : every_shape(symbols)) shapes.push_back(std::move(b));
  } else {
    shapes.resize(3);
    for (const PlanSymbol& y : symbols) {
      shapes[1][y.name] = y.min;
      shapes[2][y.name] = y.max;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  BuildConfig quiet = config;
  quiet.progress = nullptr;
  KILN_ASSIGN_OR_RETURN(ShapePlan at_opt, emit_shape(net, shapes[0], config));
  std::vector<ShapePlan> plans;
  plans.push_back(std::move(at_opt));
  {
    KILN_ASSIGN_OR_RETURN(std::vector<ShapePlan> rest,
                          emit_shapes(net, std::vector<ir::SymBindings>(shapes.begin() + 1, shapes.end()), quiet));
    for (ShapePlan& p : rest) plans.push_back(std::move(p));
  }
  // A size a launch is given alike at every shape planned is compiled into
  // its kernel; one that moves is read at run time. (Without a table, the
  // kernel of a shape not planned here is compiled when first called.)
  const auto sites = launch_sites(plans);
  auto runtime_of = [&](const Site& site, const std::vector<int64_t>&) { return sites.at(site).moves; };
  RangeBuild out;
  std::map<std::string, int> index;  // kernel_key -> kernels
  int64_t arena = 0;
  for (ShapePlan& sp : plans) {
    assign_kernels(sp, runtime_of, out.kernels, index);
    arena = std::max(arena, sp.plan.arena_bytes);
  }
  out.plan = std::move(plans[0].plan);
  out.plan.kernel_keys.assign(out.kernels.size(), "");
  for (const auto& [key, k] : index) out.plan.kernel_keys[static_cast<size_t>(k)] = key;
  out.plan.symbols = std::move(symbols);
  out.plan.arena_bytes = arena;
  if (table) {
    // Structures once the steps name the engine's kernels (a variant's steps serve all its shapes).
    std::vector<std::string> structures(plans.size());
    parallel_for(plans.size() - 1, [&](size_t i) { structures[i + 1] = ShapeTable::structure(plans[i + 1].plan); });
    auto t = std::make_shared<ShapeTable>();
    for (size_t i = 1; i < plans.size(); ++i) t->add(std::move(plans[i].plan), std::move(structures[i]));
    t->finish();
    if (config.progress)
      config.progress("planned each of " + std::to_string(plans.size() - 1) + " shapes in " +
                      std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) +
                      " s: " + std::to_string(t->variants.size()) + " variant(s), " +
                      std::to_string(t->records.size()) + " bytes of sizes, " + std::to_string(out.kernels.size()) +
                      " kernels");
    out.plan.table = std::move(t);
  }
  return out;
}

namespace {

// A plan for every shape of the symbols' ranges (see build_cuda_plan).
Expected<CudaPlan> build_range_plan(const engine::Network& net, const BuildConfig& config) {
  KILN_ASSIGN_OR_RETURN(RangeBuild r, plan_range(net, config));
  CudaPlan plan = std::move(r.plan);
  // A table's convolutions are also timed at the range's ends, while NVRTC
  // is still compiling.
  TunedAlgos seed;
  std::vector<TimedShape> timed;
  KILN_TRY(compile_and_tune(r.kernels, config, plan, [&]() -> Status {
    if (!plan.table) return Status::ok();
    // The kernels' names are not known yet: a shape's plan read from the
    // table is checked against placeholders (only its convolutions run).
    CudaPlan named = plan;
    named.kernel_names.assign(plan.kernel_keys.size(), "");
    return time_range_ends(named, config, seed, timed);
  }));
  // Other shapes choose their algorithms within the same workspace limit:
  // here for a table, else when first run.
  bool convs = false;
  for (const Step& st : plan.steps) convs = convs || st.kind == Step::Kind::kConv;
  plan.workspace_bytes = std::max({plan.workspace_bytes, kGemmWorkspaceBytes, convs ? kConvWorkspaceBytes : 0});
  if (plan.table) KILN_TRY(choose_table_algorithms(plan, config, std::move(seed), timed));
  KILN_TRY(plan.validate());
  return plan;
}

}  // namespace

namespace {

// `net` specialized to `bindings` and emitted with every size its kernels read at run time.
Expected<ShapePlan> emit_shape(const engine::Network& net, const ir::SymBindings& bindings, const BuildConfig& config) {
  engine::Network shape = clone_network(net);
  KILN_TRY(ir::specialize(shape.graph, bindings));
  for (const std::string& n : network_symbols(shape))
    return internal_error("size " + n + " has no value for this shape");
  std::string label;  // names the shape in dumps
  if (config.passes.dump)
    for (const auto& [symbol, value] : bindings)
      label += (label.empty() ? "" : ", ") + symbol + "=" + std::to_string(value);
  KILN_TRY(engine::run_network_passes(shape, cuda_network_passes(), config.passes, label));
  BuildConfig c = config;
  c.sizes_at_run_time = true;
  Builder b(shape, c);
  b.set_bindings(bindings);
  KILN_TRY(b.emit());
  ShapePlan out;
  out.plan = std::move(b.plan());
  out.kernels = b.kernels();
  for (const KernelChoice& k : out.kernels) out.identities.push_back(identity_digest(k.first));
  return out;
}

}  // namespace

Expected<ShapePlan> plan_for_shape(const engine::Network& net, const ir::SymBindings& bindings,
                                   const BuildConfig& config) {
  KILN_ASSIGN_OR_RETURN(ShapePlan a, emit_shape(net, bindings, config));
  // A neighbouring shape (each symbol one more, or one less at its max): a
  // size a launch gives its kernel at both shapes alike is compiled in, one
  // that moves with the symbols is read at run time. Kernels are known by
  // their text and literal sizes, so a size that merely happens to agree at
  // both shapes still finds (or compiles) the right kernel.
  ir::SymBindings near = bindings;
  bool moved = false;
  for (auto& [name, v] : near) {
    auto it = config.symbols.find(name);
    const int64_t lo = it != config.symbols.end() ? it->second.min : 1;
    const int64_t hi = it != config.symbols.end() ? it->second.max : INT64_MAX;
    if (v < hi) {
      ++v;
      moved = true;
    } else if (v > lo) {
      --v;
      moved = true;
    }
  }
  std::vector<ShapePlan> both;
  if (moved)
    if (Expected<ShapePlan> b = emit_shape(net, near, config)) both.push_back(std::move(*b));
  const size_t neighbours = both.size();
  std::vector<KernelChoice> kernels;
  std::map<std::string, int> index;
  if (neighbours == 0) {
    assign_kernels(
        a, [](const Site&, const std::vector<int64_t>& d) { return std::vector<bool>(d.size(), true); }, kernels,
        index);
  } else {
    both.push_back(a);
    const auto sites = launch_sites(both);
    // A launch the neighbour does not make reads every size at run time.
    assign_kernels(
        a,
        [&](const Site& site, const std::vector<int64_t>& d) {
          const SiteSizes& z = sites.at(site);
          return z.shapes < 2 ? std::vector<bool>(d.size(), true) : z.moves;
        },
        kernels, index);
  }
  a.kernels = std::move(kernels);
  return a;
}

Expected<CudaPlan> build_cuda_plan(engine::Network& net, const BuildConfig& config) {
  KILN_TRY(net.verify());
  if (!network_symbols(net).empty()) return build_range_plan(net, config);
  KILN_TRY(engine::run_network_passes(net, cuda_network_passes(), config.passes));
  Builder b(net, config);
  return b.build();
}

}  // namespace kiln::cuda
