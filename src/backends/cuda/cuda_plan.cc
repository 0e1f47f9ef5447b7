#include "backends/cuda/cuda_plan.h"

#include <nlohmann/json.hpp>

#include "backends/cuda/kernel_source.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

namespace {

using nlohmann::json;

int64_t bytes_of(DType t, const std::vector<int64_t>& sizes) {
  int64_t n = static_cast<int64_t>(dtype_size(t));
  for (int64_t s : sizes) n *= s;
  return n;
}

// Sizes and bytes a plan may declare for one tensor: each size in
// [0, 2^40] and their bytes at most 2^48, so that bytes_of never overflows
// on a plan that passed (kFormat naming `what` otherwise).
constexpr int64_t kMaxDim = int64_t{1} << 40, kMaxBytes = int64_t{1} << 48;
// More shared memory than any CUDA device gives one block (227 KiB on sm_90).
constexpr uint32_t kMaxSharedBytes = 256 << 10;
Status check_sizes(DType t, const std::vector<int64_t>& sizes, const std::string& what) {
  int64_t n = static_cast<int64_t>(dtype_size(t));
  for (int64_t s : sizes) {
    if (s < 0 || s > kMaxDim)
      return format_error("CUDA plan: " + what + " has size " + std::to_string(s) + " in " + shape_to_string(sizes));
    if (__builtin_mul_overflow(n, s, &n) || n > kMaxBytes)
      return format_error(FileFault::kSizeOverflow,
                          "CUDA plan: " + what + " of " + shape_to_string(sizes) + " is larger than a plan can hold");
  }
  return Status::ok();
}

json ref_json(const BufferRef& r) { return json::array({r.region, r.offset}); }
BufferRef ref_from(const json& j) { return {j.at(0).get<int>(), j.at(1).get<int64_t>()}; }

DType dtype_from(const json& j) {
  auto d = dtype_from_name(j.get<std::string>());
  if (!d) throw std::invalid_argument("unknown dtype '" + j.get<std::string>() + "'");
  return *d;
}
std::string dname(DType t) { return std::string(dtype_name(t)); }

// Each library step's fields, listed once: its JSON name and where it lives
// (a group is one JSON array of several fields). The JSON writer and reader
// and the walk over a plan's numbers (visit_plan_numbers) all follow the list.
template <class V>
void gemm_fields(GemmLaunch& g, V& v) {
  GemmShape& s = g.shape;
  v.dtype("dtype", s.dtype);
  v("tf32", s.allow_tf32);
  v("m", s.m);
  v("n", s.n);
  v("k", s.k);
  v("batch", s.batch);
  v("trans_a", s.trans_a);
  v("trans_b", s.trans_b);
  v("lda", s.lda);
  v("ldb", s.ldb);
  v("ldc", s.ldc);
  v("sa", s.batch_stride_a);
  v("sb", s.batch_stride_b);
  v("sc", s.batch_stride_c);
  v.enumerated("epilogue", s.epilogue, GemmEpilogue::kBiasGelu);
  v("alpha", s.alpha);
  v("beta", s.beta);
  v("algo", g.algo.data);
  v("workspace", g.algo.workspace_bytes);
  v("ms", g.algo.measured_ms);
  v("candidates", g.algo.candidates);
  v("a", g.a);
  v("b", g.b);
  v("c", g.c);
  v("has_bias", g.has_bias);
  v("bias", g.bias);
}

template <class V>
void conv_fields(ConvLaunch& c, V& v) {
  ConvShape& s = c.shape;
  v.dtype("dtype", s.dtype);
  v("tf32", s.allow_tf32);
  v.group("nchw", s.n, s.c, s.h, s.w);
  v.group("krs", s.k, s.r, s.s);
  v("groups", s.groups);
  v.group("stride", s.stride_h, s.stride_w);
  v.group("pad", s.pad_h, s.pad_w);
  v.group("dilation", s.dilation_h, s.dilation_w);
  v.group("out", s.out_h, s.out_w);
  v("channels_last", s.channels_last);
  v("has_bias", s.has_bias);
  v("has_residual", s.has_residual);
  v.enumerated("act", s.act, ConvActivation::kRelu);
  v("algo", c.algo.algo);
  v("workspace", c.algo.workspace_bytes);
  v("ms", c.algo.measured_ms);
  v("x", c.x);
  v("w", c.w);
  v("bias", c.bias);
  v("z", c.z);
  v("y", c.y);
}

// The fields into JSON.
struct JsonWriter {
  json j = json::object();
  template <class T>
  void operator()(const char* name, const T& x) {
    j[name] = x;
  }
  void operator()(const char* name, const BufferRef& r) { j[name] = ref_json(r); }
  void dtype(const char* name, DType t) { j[name] = dname(t); }
  template <class E>
  void enumerated(const char* name, E e, E) {
    j[name] = static_cast<int>(e);
  }
  template <class... T>
  void group(const char* name, const T&... xs) {
    j[name] = json::array({xs...});
  }
};

// The fields from JSON (throws on a missing or malformed field, or an enum
// value past the last one; validate() checks the values).
struct JsonReader {
  const json& j;
  template <class T>
  void operator()(const char* name, T& x) {
    x = j.at(name).get<T>();
  }
  void operator()(const char* name, BufferRef& r) { r = ref_from(j.at(name)); }
  void dtype(const char* name, DType& t) { t = dtype_from(j.at(name)); }
  template <class E>
  void enumerated(const char* name, E& e, E last) {
    const int v = j.at(name).get<int>();
    if (v < 0 || v > static_cast<int>(last)) throw std::invalid_argument(std::string("bad ") + name);
    e = static_cast<E>(v);
  }
  template <class... T>
  void group(const char* name, T&... xs) {
    const auto values = j.at(name).get<std::array<int64_t, sizeof...(T)>>();
    size_t i = 0;
    ((xs = values[i++]), ...);
  }
};

// The sizes, strides and offsets among the fields (every int64 field and
// every buffer's offset), in list order.
struct NumberVisitor {
  const std::function<void(int64_t&)>& f;
  template <class T>
  void operator()(const char*, T&) {}
  void operator()(const char*, int64_t& x) { f(x); }
  void operator()(const char*, BufferRef& r) { f(r.offset); }
  void dtype(const char*, DType&) {}
  template <class E>
  void enumerated(const char*, E&, E) {}
  template <class... T>
  void group(const char*, T&... xs) {
    (f(xs), ...);
  }
};

template <class Launch>
json launch_json(const Launch& l, void (*fields)(Launch&, JsonWriter&)) {
  JsonWriter w;
  fields(const_cast<Launch&>(l), w);  // the writer reads only
  return std::move(w.j);
}

template <class Launch>
Launch launch_from(const json& j, void (*fields)(Launch&, JsonReader&)) {
  Launch l;
  JsonReader r{j};
  fields(l, r);
  return l;
}

json io_json(const IoSlot& s) {
  return {{"name", s.name}, {"dtype", dname(s.dtype)}, {"sizes", s.sizes}, {"offset", s.offset}};
}
IoSlot io_from(const json& j) {
  return {j.at("name").get<std::string>(), dtype_from(j.at("dtype")), j.at("sizes").get<std::vector<int64_t>>(),
          j.at("offset").get<int64_t>()};
}

}  // namespace

int64_t DeviceConstant::nbytes() const {
  if (fp8_rows && sizes.size() == 2) return fp8_scales_offset() + 4 * sizes[1];
  if (padded_channels > 0 && sizes.size() == 4) return bytes_of(dtype, {sizes[0], padded_channels, sizes[2], sizes[3]});
  return bytes_of(dtype, sizes);
}

Status DeviceConstant::check() const {
  const std::string what = "constant '" + name + "'";
  KILN_TRY(check_sizes(dtype, sizes, what));
  if (channels_last && sizes.size() != 4)
    return format_error("CUDA plan: channels-last " + what + " is " + shape_to_string(sizes) + ", not a 4-D filter");
  if (transposed && (sizes.size() != 2 || channels_last))
    return format_error("CUDA plan: transposed " + what + " is " + shape_to_string(sizes) + ", not a 2-D matrix");
  if (fp8_rows && (!transposed || dtype != DType::UInt8 || padded_channels != 0))
    return format_error("CUDA plan: FP8 " + what + " is not a transposed uint8 matrix");
  if (padded_channels != 0) {
    // Read sizes[1] only once the rank is known to be 4.
    if (!channels_last)
      return format_error("CUDA plan: " + what + " pads its channels to " + std::to_string(padded_channels) +
                          " but is " + shape_to_string(sizes) + ", not a channels-last filter");
    // The builder pads a filter's channels to the next multiple of 8 (so that
    // a tensor-core convolution takes an image stem's 3), never further.
    if (padded_channels < sizes[1] || padded_channels > (std::max<int64_t>(sizes[1], 1) + 7) / 8 * 8)
      return format_error("CUDA plan: " + what + " pads its " + std::to_string(sizes[1]) + " channels to " +
                          std::to_string(padded_channels));
    KILN_TRY(check_sizes(dtype, {sizes[0], padded_channels, sizes[2], sizes[3]}, what + " (padded)"));
  }
  return Status::ok();
}
int64_t IoSlot::nbytes() const { return bytes_of(dtype, sizes); }

namespace {

// What a plan and each variant of its shape table hold: arena, error word,
// constants, slots and steps.
json body_json(const CudaPlan& p) {
  json j;
  j["arena_bytes"] = p.arena_bytes;
  j["error_offset"] = p.error_offset;
  j["error_layers"] = p.error_layers;
  json cs = json::array();
  for (const auto& c : p.constants)
    cs.push_back({{"name", c.name},
                  {"dtype", dname(c.dtype)},
                  {"sizes", c.sizes},
                  {"channels_last", c.channels_last},
                  {"transposed", c.transposed},
                  {"padded_channels", c.padded_channels},
                  {"fp8_rows", c.fp8_rows}});
  j["constants"] = cs;
  json ins = json::array(), outs = json::array();
  for (const auto& s : p.inputs) ins.push_back(io_json(s));
  for (const auto& s : p.outputs) outs.push_back(io_json(s));
  j["inputs"] = ins;
  j["outputs"] = outs;
  json steps_j = json::array();
  for (const Step& s : p.steps) {
    json sj = {{"layer", s.layer}};
    switch (s.kind) {
      case Step::Kind::kKernel: {
        json args = json::array();
        for (const auto& a : s.kernel.args) args.push_back(ref_json(a));
        sj["kernel"] = {{"index", s.kernel.kernel},
                        {"grid", s.kernel.grid},
                        {"block", s.kernel.block},
                        {"shared", s.kernel.shared_bytes},
                        {"args", args}};
        if (!s.kernel.dims.empty()) sj["kernel"]["dims"] = s.kernel.dims;
        break;
      }
      case Step::Kind::kGemm: sj["gemm"] = launch_json<GemmLaunch>(s.gemm, &gemm_fields<JsonWriter>); break;
      case Step::Kind::kConv: sj["conv"] = launch_json<ConvLaunch>(s.conv, &conv_fields<JsonWriter>); break;
    }
    steps_j.push_back(std::move(sj));
  }
  j["steps"] = steps_j;
  return j;
}

// body_json's fields into `p` (throws on malformed JSON; validate() checks the values).
void body_from(const json& j, CudaPlan& p) {
  p.arena_bytes = j.at("arena_bytes").get<int64_t>();
  p.error_offset = j.at("error_offset").get<int64_t>();
  p.error_layers = j.at("error_layers").get<std::vector<std::string>>();
  for (const json& c : j.at("constants"))
    p.constants.push_back({c.at("name").get<std::string>(), dtype_from(c.at("dtype")),
                           c.at("sizes").get<std::vector<int64_t>>(), c.at("channels_last").get<bool>(),
                           c.value("transposed", false), c.value("padded_channels", int64_t{0}),
                           c.value("fp8_rows", false)});
  for (const json& s : j.at("inputs")) p.inputs.push_back(io_from(s));
  for (const json& s : j.at("outputs")) p.outputs.push_back(io_from(s));
  for (const json& sj : j.at("steps")) {
    Step s;
    s.layer = sj.at("layer").get<std::string>();
    if (sj.contains("kernel")) {
      const json& k = sj.at("kernel");
      s.kind = Step::Kind::kKernel;
      s.kernel.kernel = k.at("index").get<int>();
      s.kernel.grid = k.at("grid").get<std::array<uint32_t, 3>>();
      s.kernel.block = k.at("block").get<std::array<uint32_t, 3>>();
      s.kernel.shared_bytes = k.at("shared").get<uint32_t>();
      for (const json& a : k.at("args")) s.kernel.args.push_back(ref_from(a));
      if (k.contains("dims")) s.kernel.dims = k.at("dims").get<std::vector<int64_t>>();
    } else if (sj.contains("gemm")) {
      s.kind = Step::Kind::kGemm;
      s.gemm = launch_from<GemmLaunch>(sj.at("gemm"), &gemm_fields<JsonReader>);
    } else if (sj.contains("conv")) {
      s.kind = Step::Kind::kConv;
      s.conv = launch_from<ConvLaunch>(sj.at("conv"), &conv_fields<JsonReader>);
    } else {
      throw std::invalid_argument("step for layer '" + s.layer + "' has no kernel, gemm or conv");
    }
    p.steps.push_back(std::move(s));
  }
}

}  // namespace

std::string CudaPlan::to_json() const {
  json j = body_json(*this);
  j["device"] = device_name;
  j["arch"] = arch;
  j["sm_count"] = sm_count;
  j["precision"] = std::string(name_of(precision));
  j["workspace_bytes"] = workspace_bytes;
  j["kernels"] = kernel_names;
  if (!symbols.empty()) {
    json syms = json::array();
    for (const PlanSymbol& y : symbols)
      syms.push_back({{"name", y.name}, {"min", y.min}, {"opt", y.opt}, {"max", y.max}});
    j["symbols"] = syms;
    j["kernel_keys"] = kernel_keys;
  }
  if (table) {
    json variants = json::array(), gemms = json::array(), convs = json::array();
    for (const CudaPlan& v : table->variants) variants.push_back(body_json(v));
    for (const auto& [shape, a] : table->gemm_algos) gemms.push_back({shape, a.data, a.workspace_bytes});
    for (const auto& [shape, a] : table->conv_algos) convs.push_back({shape, a.algo, a.workspace_bytes});
    j["table"] = {{"variants", variants}, {"varying", table->varying}, {"gemm_algos", gemms}, {"conv_algos", convs}};
  }
  return j.dump();
}

Expected<CudaPlan> CudaPlan::from_json(std::string_view text, std::span<const uint8_t> cubin,
                                       std::span<const uint8_t> shapes) {
  CudaPlan p;
  std::shared_ptr<ShapeTable> table;
  try {
    const json j = json::parse(text);
    p.device_name = j.at("device").get<std::string>();
    p.arch = j.at("arch").get<std::string>();
    p.sm_count = j.at("sm_count").get<int>();
    Expected<Precision> precision = parse_precision(j.at("precision").get<std::string>());
    if (!precision) return format_error("CUDA plan: " + precision.status().message());
    p.precision = *precision;
    p.workspace_bytes = j.at("workspace_bytes").get<size_t>();
    p.kernel_names = j.at("kernels").get<std::vector<std::string>>();
    if (j.contains("symbols")) {
      for (const json& y : j.at("symbols"))
        p.symbols.push_back({y.at("name").get<std::string>(), y.at("min").get<int64_t>(), y.at("opt").get<int64_t>(),
                             y.at("max").get<int64_t>()});
      p.kernel_keys = j.at("kernel_keys").get<std::vector<std::string>>();
    }
    body_from(j, p);
    if (j.contains("table")) {
      const json& t = j.at("table");
      table = std::make_shared<ShapeTable>();
      for (const json& v : t.at("variants")) {
        CudaPlan vp;
        body_from(v, vp);
        table->variants.push_back(std::move(vp));
      }
      table->varying = t.at("varying").get<std::vector<std::vector<uint32_t>>>();
      for (const json& g : t.at("gemm_algos"))
        table->gemm_algos[g.at(0).get<std::string>()] = {g.at(1).get<std::array<uint64_t, 8>>(), g.at(2).get<size_t>()};
      for (const json& c : t.at("conv_algos"))
        table->conv_algos[c.at(0).get<std::string>()] = {c.at(1).get<int>(), c.at(2).get<size_t>()};
    }
  } catch (const std::exception& e) {
    return format_error(std::string("CUDA plan: malformed JSON: ") + e.what());
  }
  p.cubin.assign(cubin.begin(), cubin.end());
  KILN_TRY(p.validate());
  if (table) {
    if (p.symbols.empty()) return format_error("CUDA plan: a shape table in a plan without size symbols");
    const uint64_t n = ShapeTable::count(p.symbols);
    if (n > kMaxTableShapes)
      return format_error("CUDA plan: a shape table of " + std::to_string(n) + " shapes, more than " +
                          std::to_string(kMaxTableShapes));
    table->records.assign(shapes.begin(), shapes.end());
    KILN_TRY(table->parse(static_cast<size_t>(n)));
    for (const auto& [shape, a] : table->gemm_algos)
      if (a.workspace_bytes > p.workspace_bytes)
        return format_error("CUDA plan: the algorithm for " + shape + " needs more workspace than the engine's");
    for (const auto& [shape, a] : table->conv_algos)
      if (a.workspace_bytes > p.workspace_bytes)
        return format_error("CUDA plan: the algorithm for " + shape + " needs more workspace than the engine's");
    p.table = std::move(table);
  }
  return p;
}

namespace {

// Bytes from an operand's first element to past its last: `rows` rows of
// `cols` elements `ld` apart, `batch` times `batch_stride` apart. In 128
// bits, so that no plan value can wrap it; the caller compares it with the
// region's bytes.
__int128 strided_extent(DType t, int64_t batch, int64_t batch_stride, int64_t rows, int64_t ld, int64_t cols) {
  const __int128 last = static_cast<__int128>(batch - 1) * batch_stride + static_cast<__int128>(rows - 1) * ld + cols;
  return last * static_cast<__int128>(dtype_size(t));
}

}  // namespace

Status CudaPlan::validate() const {
  // Compared without adding to error_offset (which could wrap).
  if (arena_bytes < 8 || arena_bytes > kMaxBytes || error_offset < 0 || error_offset > arena_bytes - 4 ||
      error_offset % 4 != 0)
    return format_error("CUDA plan: arena of " + std::to_string(arena_bytes) + " bytes with error word at " +
                        std::to_string(error_offset));
  if (workspace_bytes > static_cast<size_t>(kMaxBytes))
    return format_error("CUDA plan: a workspace of " + std::to_string(workspace_bytes) + " bytes");
  if (!symbols.empty() && kernel_keys.size() != kernel_names.size())
    return format_error("CUDA plan: " + std::to_string(kernel_keys.size()) + " kernel keys for " +
                        std::to_string(kernel_names.size()) + " kernels");
  for (const PlanSymbol& y : symbols)
    if (y.name.empty() || y.min < 0 || y.min > y.opt || y.opt > y.max || y.max > kMaxBytes)
      return format_error("CUDA plan: symbol '" + y.name + "' with range " + std::to_string(y.min) + ".." +
                          std::to_string(y.max) + " (opt " + std::to_string(y.opt) + ")");
  // A reference to `nbytes` bytes (all of them inside the region); `written`:
  // the step writes there, which only the arena may be (device weights are
  // shared with other engines).
  auto check_ref = [&](const BufferRef& r, __int128 nbytes, const std::string& where, bool written = false) -> Status {
    if (nbytes < 0) return format_error("CUDA plan: " + where + ": negative size");
    if (r.region == kArenaRegion) {
      if (r.offset < 0 || r.offset > arena_bytes || nbytes > arena_bytes - r.offset)
        return format_error(FileFault::kOutOfBounds,
                            "CUDA plan: " + where + ": " + std::to_string(static_cast<long double>(nbytes)) +
                                " bytes at arena offset " + std::to_string(r.offset) + " do not fit the arena of " +
                                std::to_string(arena_bytes) + " bytes");
      return Status::ok();
    }
    if (r.region < 0 || static_cast<size_t>(r.region) >= constants.size())
      return format_error(FileFault::kDanglingReference,
                          "CUDA plan: " + where + ": constant " + std::to_string(r.region) + " does not exist");
    const DeviceConstant& c = constants[static_cast<size_t>(r.region)];
    if (written)
      return format_error(FileFault::kOutOfBounds, "CUDA plan: " + where + ": writes into constant '" + c.name + "'");
    if (r.offset < 0 || r.offset > c.nbytes() || nbytes > c.nbytes() - r.offset)
      return format_error(FileFault::kOutOfBounds,
                          "CUDA plan: " + where + ": reads past the end of constant '" + c.name + "'");
    return Status::ok();
  };
  for (const auto& c : constants) KILN_TRY(c.check());
  for (const auto* list : {&inputs, &outputs})
    for (const IoSlot& s : *list) {
      KILN_TRY(check_sizes(s.dtype, s.sizes, "slot '" + s.name + "'"));
      // Slots start 256-byte aligned, as every arena allocation does: a
      // caller's memory bound in place of one keeps the alignment the
      // kernels' vector loads were built for.
      if (s.offset % 256 != 0)
        return format_error("CUDA plan: slot '" + s.name + "' at arena offset " + std::to_string(s.offset) +
                            ", which is not 256-byte aligned");
      KILN_TRY(check_ref({kArenaRegion, s.offset}, s.nbytes(), "slot '" + s.name + "'"));
    }
  for (const Step& s : steps) {
    const std::string where = "layer '" + s.layer + "'";
    switch (s.kind) {
      case Step::Kind::kKernel:
        if (s.kernel.kernel < 0 || static_cast<size_t>(s.kernel.kernel) >= kernel_names.size())
          return format_error(FileFault::kDanglingReference, "CUDA plan: " + where + ": kernel index out of range");
        for (uint32_t g : s.kernel.grid)
          if (g == 0) return format_error("CUDA plan: " + where + ": empty grid");
        if (s.kernel.grid[1] > 65535 || s.kernel.grid[2] > 65535)
          return format_error("CUDA plan: " + where + ": grid of more than 65535 blocks in y or z");
        // A product in 64 bits: three 32-bit sizes can wrap to a small one in 32.
        if (uint64_t{s.kernel.block[0]} * s.kernel.block[1] * s.kernel.block[2] > 1024 || s.kernel.block[0] == 0 ||
            s.kernel.block[1] == 0 || s.kernel.block[2] == 0)
          return format_error("CUDA plan: " + where + ": bad block size");
        if (s.kernel.shared_bytes > kMaxSharedBytes)
          return format_error("CUDA plan: " + where + ": " + std::to_string(s.kernel.shared_bytes) +
                              " bytes of shared memory");
        // What a kernel reads and writes through its arguments is the
        // kernel's own (compiled code, trusted like a binary); its arguments
        // must at least start inside their regions. load() checks their count
        // against the compiled kernel's parameters.
        for (const auto& a : s.kernel.args) KILN_TRY(check_ref(a, 0, where));
        if (s.kernel.dims.size() > kMaxKernelDims)
          return format_error("CUDA plan: " + where + ": " + std::to_string(s.kernel.dims.size()) +
                              " run-time sizes, more than a kernel takes (" + std::to_string(kMaxKernelDims) + ")");
        break;
      case Step::Kind::kGemm: {
        const GemmLaunch& g = s.gemm;
        const GemmShape& sh = g.shape;
        KILN_TRY(sh.validate().with_context("CUDA plan: " + where));
        KILN_TRY(check_ref(g.a,
                           strided_extent(sh.dtype, sh.batch, sh.batch_stride_a, sh.trans_a ? sh.k : sh.m, sh.lda,
                                          sh.trans_a ? sh.m : sh.k),
                           where + " (A)"));
        KILN_TRY(check_ref(g.b,
                           strided_extent(sh.dtype, sh.batch, sh.batch_stride_b, sh.trans_b ? sh.n : sh.k, sh.ldb,
                                          sh.trans_b ? sh.k : sh.n),
                           where + " (B)"));
        KILN_TRY(check_ref(g.c, strided_extent(sh.dtype, sh.batch, sh.batch_stride_c, sh.m, sh.ldc, sh.n),
                           where + " (C)", /*written=*/true));
        if (g.has_bias != (sh.epilogue != GemmEpilogue::kNone))
          return format_error("CUDA plan: " + where + ": a bias pointer " + (g.has_bias ? "with" : "without") +
                              " an epilogue that adds one");
        if (g.has_bias) KILN_TRY(check_ref(g.bias, strided_extent(sh.dtype, 1, 0, 1, 0, sh.n), where + " (bias)"));
        if (g.algo.workspace_bytes > workspace_bytes)
          return format_error("CUDA plan: " + where + ": workspace larger than the engine's");
        break;
      }
      case Step::Kind::kConv: {
        const ConvLaunch& c = s.conv;
        const ConvShape& sh = c.shape;
        KILN_TRY(sh.validate().with_context("CUDA plan: " + where));
        const __int128 x = strided_extent(sh.dtype, 1, 0, 1, 0, sh.n * sh.c * sh.h * sh.w);
        const __int128 y = strided_extent(sh.dtype, 1, 0, 1, 0, sh.n * sh.k * sh.out_h * sh.out_w);
        KILN_TRY(check_ref(c.x, x, where + " (x)"));
        KILN_TRY(check_ref(c.w, strided_extent(sh.dtype, 1, 0, 1, 0, sh.k * (sh.c / sh.groups) * sh.r * sh.s),
                           where + " (filter)"));
        if (sh.has_bias) KILN_TRY(check_ref(c.bias, strided_extent(sh.dtype, 1, 0, 1, 0, sh.k), where + " (bias)"));
        if (sh.has_residual) KILN_TRY(check_ref(c.z, y, where + " (residual)"));
        KILN_TRY(check_ref(c.y, y, where + " (y)", /*written=*/true));
        if (c.algo.workspace_bytes > workspace_bytes)
          return format_error("CUDA plan: " + where + ": workspace larger than the engine's");
        break;
      }
    }
  }
  return Status::ok();
}

namespace {

// Whether an engine slot is what the layer graph says its binding is.
// A slot against its layer-graph value: a symbolic scalar is an int64 0-d
// slot; a tensor's sizes are its type's, symbolic ones evaluated at `at`.
Status check_slot(const IoSlot& slot, const ir::Value& v, const std::string& what, const std::string& which,
                  const ir::SymBindings& at) {
  bool same = v.kind == ir::ValueKind::kSymInt ? slot.dtype == DType::Int64 && slot.sizes.empty()
                                               : v.kind == ir::ValueKind::kTensor && slot.dtype == v.type.dtype &&
                                                     slot.sizes.size() == v.type.sizes.size();
  for (size_t d = 0; same && d < slot.sizes.size(); ++d) {
    const ir::Dim& dim = v.type.sizes[d];
    Expected<int64_t> want = dim.is_static() ? Expected<int64_t>(dim.value) : dim.expr->eval(at);
    same = want.has_value() && *want == slot.sizes[d];
  }
  if (!same)
    return format_error(FileFault::kSizeMismatch, what + ": the CUDA plan's " + which + " slot '" + slot.name +
                                                      "' is " + std::string(dtype_name(slot.dtype)) +
                                                      shape_to_string(slot.sizes) + ", the layer graph's is " +
                                                      v.type.to_string());
  return Status::ok();
}

}  // namespace

ir::SymBindings opt_bindings(const CudaPlan& plan) {
  ir::SymBindings b;
  for (const PlanSymbol& y : plan.symbols) b[y.name] = y.opt;
  return b;
}

Expected<CudaEnginePlan> read_cuda_engine_plan(std::span<const uint8_t> bytes, std::string_view what_view) {
  const std::string what(what_view);
  CudaEnginePlan out;
  KILN_ASSIGN_OR_RETURN(out.common, engine::deserialize_plan(bytes, "cuda", what));
  const std::vector<uint8_t>* json = nullptr;
  const std::vector<uint8_t>* cubin = nullptr;
  std::span<const uint8_t> shapes;
  for (const auto& [name, data] : out.common.extra) {
    if (name == kPlanSection) json = &data;
    if (name == kCubinSection) cubin = &data;
    if (name == kShapesSection) shapes = data;
  }
  if (!json || !cubin)
    return format_error(FileFault::kDanglingReference,
                        what + ": CUDA plan without its " + kPlanSection + "/" + kCubinSection + " sections");
  auto parsed =
      CudaPlan::from_json(std::string_view(reinterpret_cast<const char*>(json->data()), json->size()), *cubin, shapes);
  if (!parsed) return parsed.status().with_context(what);
  out.plan = std::move(*parsed);
  const CudaPlan& p = out.plan;
  const engine::Network& net = out.common.network;
  const auto& values = net.graph.inputs();
  const auto& results = net.graph.outputs();
  if (p.inputs.size() != net.num_inputs || p.outputs.size() != results.size() || values.size() < net.num_inputs)
    return format_error(FileFault::kSizeMismatch, what + ": the CUDA plan has " + std::to_string(p.inputs.size()) +
                                                      " input and " + std::to_string(p.outputs.size()) +
                                                      " output slots, the layer graph " +
                                                      std::to_string(net.num_inputs) + " inputs and " +
                                                      std::to_string(results.size()) + " outputs");
  const ir::SymBindings at = opt_bindings(p);
  for (size_t i = 0; i < p.inputs.size(); ++i) KILN_TRY(check_slot(p.inputs[i], *values[i], what, "input", at));
  for (size_t o = 0; o < p.outputs.size(); ++o) KILN_TRY(check_slot(p.outputs[o], *results[o], what, "output", at));
  out.alias_input.assign(p.outputs.size(), -1);
  for (const engine::PlanAlias& a : out.common.aliases) {
    // deserialize_plan checked both indices against the layer graph.
    const IoSlot& o = p.outputs.at(static_cast<size_t>(a.output));
    const IoSlot& in = p.inputs.at(static_cast<size_t>(a.input));
    if (o.offset != in.offset || o.nbytes() != in.nbytes())
      return format_error(FileFault::kOverlap, what + ": output " + std::to_string(a.output) +
                                                   " is written in place into input " + std::to_string(a.input) +
                                                   " but the plan gives it another slot");
    out.alias_input[static_cast<size_t>(a.output)] = a.input;
  }
  return out;
}

void visit_plan_numbers(CudaPlan& p, const std::function<void(int64_t&)>& f, bool* overflow) {
  auto u32 = [&](uint32_t& v) {
    int64_t x = v;
    f(x);
    if (x < 0 || x > int64_t{UINT32_MAX}) {
      if (overflow) *overflow = true;
      return;
    }
    v = static_cast<uint32_t>(x);
  };
  auto ints = [&](std::vector<int64_t>& v) {
    for (int64_t& x : v) f(x);
  };
  f(p.arena_bytes);
  f(p.error_offset);
  for (DeviceConstant& c : p.constants) {
    ints(c.sizes);
    f(c.padded_channels);
  }
  for (auto* list : {&p.inputs, &p.outputs})
    for (IoSlot& s : *list) {
      ints(s.sizes);
      f(s.offset);
    }
  for (Step& s : p.steps) {
    switch (s.kind) {
      case Step::Kind::kKernel:
        for (uint32_t& g : s.kernel.grid) u32(g);
        for (uint32_t& b : s.kernel.block) u32(b);
        u32(s.kernel.shared_bytes);
        for (BufferRef& a : s.kernel.args) f(a.offset);
        ints(s.kernel.dims);
        break;
      case Step::Kind::kGemm: {
        NumberVisitor v{f};
        gemm_fields(s.gemm, v);
        break;
      }
      case Step::Kind::kConv: {
        NumberVisitor v{f};
        conv_fields(s.conv, v);
        break;
      }
    }
  }
}

namespace {

std::vector<int64_t> plan_numbers(const CudaPlan& plan) {
  std::vector<int64_t> out;
  visit_plan_numbers(const_cast<CudaPlan&>(plan), [&](int64_t& x) { out.push_back(x); });
  return out;
}

}  // namespace

std::string ShapeTable::structure(const CudaPlan& plan) {
  CudaPlan p = plan;
  visit_plan_numbers(p, [](int64_t& x) { x = 0; });
  for (Step& s : p.steps) {
    s.gemm.algo = {};
    s.conv.algo = {};
  }
  return body_json(p).dump();
}

namespace {

void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

bool get_varint(std::span<const uint8_t> in, size_t& at, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= in.size()) return false;
    const uint8_t b = in[at++];
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

uint64_t zigzag(int64_t d) { return (static_cast<uint64_t>(d) << 1) ^ static_cast<uint64_t>(d >> 63); }
int64_t unzigzag(uint64_t v) { return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1)); }
// a + d without signed overflow (a malformed table's difference wraps, and validate() refuses the result).
int64_t plus(int64_t a, int64_t d) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(d)); }

}  // namespace

uint64_t ShapeTable::count(std::span<const PlanSymbol> symbols) {
  uint64_t n = 1;
  for (const PlanSymbol& y : symbols) {
    const uint64_t span = y.max >= y.min ? static_cast<uint64_t>(y.max - y.min) + 1 : 0;
    if (__builtin_mul_overflow(n, span, &n)) return UINT64_MAX;
  }
  return n;
}

std::vector<int64_t> ShapeTable::values(std::span<const PlanSymbol> symbols, size_t index) {
  std::vector<int64_t> out(symbols.size());
  for (size_t y = symbols.size(); y-- > 0;) {
    const size_t span = static_cast<size_t>(symbols[y].max - symbols[y].min + 1);
    out[y] = symbols[y].min + static_cast<int64_t>(index % span);
    index /= span;
  }
  return out;
}

size_t ShapeTable::index(std::span<const PlanSymbol> symbols, std::span<const int64_t> values) {
  size_t at = 0;
  for (size_t i = 0; i < symbols.size(); ++i)
    at =
        at * static_cast<size_t>(symbols[i].max - symbols[i].min + 1) + static_cast<size_t>(values[i] - symbols[i].min);
  return at;
}

void ShapeTable::add(CudaPlan plan) {
  std::string s = structure(plan);
  add(std::move(plan), std::move(s));
}

void ShapeTable::add(CudaPlan plan, std::string structure) {
  std::vector<int64_t> nums = plan_numbers(plan);
  auto [it, fresh] = variant_of_.try_emplace(std::move(structure), static_cast<uint32_t>(variants.size()));
  if (fresh) {
    numbers.push_back(nums);
    variants.push_back(std::move(plan));
  }
  pending_.emplace_back(it->second, std::move(nums));
}

void ShapeTable::finish() {
  varying.assign(variants.size(), {});
  for (size_t v = 0; v < variants.size(); ++v) {
    std::vector<bool> moves(numbers[v].size(), false);
    for (const auto& [pv, nums] : pending_)
      if (pv == v)
        for (size_t i = 0; i < nums.size(); ++i) moves[i] = moves[i] || nums[i] != numbers[v][i];
    for (size_t i = 0; i < moves.size(); ++i)
      if (moves[i]) varying[v].push_back(static_cast<uint32_t>(i));
  }
  records.clear();
  starts.clear();
  for (const auto& [v, nums] : pending_) {
    starts.push_back(static_cast<uint32_t>(records.size()));
    put_varint(records, v);
    for (uint32_t i : varying[v])
      put_varint(records,
                 zigzag(static_cast<int64_t>(static_cast<uint64_t>(nums[i]) - static_cast<uint64_t>(numbers[v][i]))));
  }
  pending_.clear();
  variant_of_.clear();
}

Status ShapeTable::parse(size_t shapes) {
  if (variants.empty() || varying.size() != variants.size())
    return format_error("CUDA plan: a shape table of " + std::to_string(variants.size()) + " variants and " +
                        std::to_string(varying.size()) + " lists of varying numbers");
  numbers.clear();
  for (size_t v = 0; v < variants.size(); ++v) {
    numbers.push_back(plan_numbers(variants[v]));
    for (size_t i = 0; i < varying[v].size(); ++i)
      if (varying[v][i] >= numbers[v].size() || (i > 0 && varying[v][i] <= varying[v][i - 1]))
        return format_error("CUDA plan: shape table variant " + std::to_string(v) + " varies number " +
                            std::to_string(varying[v][i]) + " of " + std::to_string(numbers[v].size()));
  }
  starts.clear();
  size_t at = 0;
  while (at < records.size() && starts.size() < shapes) {
    starts.push_back(static_cast<uint32_t>(at));
    uint64_t v = 0, d = 0;
    if (!get_varint(records, at, v) || v >= variants.size())
      return format_error("CUDA plan: shape " + std::to_string(starts.size() - 1) +
                          " of the shape table names no variant");
    for (size_t i = 0; i < varying[v].size(); ++i)
      if (!get_varint(records, at, d))
        return format_error("CUDA plan: shape " + std::to_string(starts.size() - 1) +
                            " of the shape table is cut short");
  }
  if (starts.size() != shapes || at != records.size() || records.size() > UINT32_MAX)
    return format_error("CUDA plan: the shape table holds " + std::to_string(starts.size()) + " shapes in " +
                        std::to_string(records.size()) + " bytes; the plan's symbols have " + std::to_string(shapes));
  return Status::ok();
}

size_t ShapeTable::variant(size_t index) const {
  size_t at = starts.at(index);
  uint64_t v = 0;
  get_varint(records, at, v);  // parse() checked every record
  return static_cast<size_t>(v);
}

bool ShapeTable::constants_fixed(size_t v) const {
  size_t before_slots = 2;  // arena and error word, then each constant's sizes and padded channels
  for (const DeviceConstant& c : variants[v].constants) before_slots += c.sizes.size() + 1;
  return varying[v].empty() || varying[v][0] >= before_slots;
}

Expected<CudaPlan> ShapeTable::shape_plan(const CudaPlan& base, size_t index) const {
  if (index >= starts.size()) return internal_error("shape " + std::to_string(index) + " is not in the shape table");
  size_t at = starts[index];
  uint64_t v = 0, d = 0;
  get_varint(records, at, v);  // parse() checked every record
  std::vector<int64_t> nums = numbers[v];
  for (uint32_t i : varying[v]) {
    get_varint(records, at, d);
    nums[i] = plus(nums[i], unzigzag(d));
  }
  CudaPlan p = variants[v];
  size_t next = 0;
  bool overflow = false;
  visit_plan_numbers(
      p, [&](int64_t& x) { x = nums[next++]; }, &overflow);
  if (overflow)
    return format_error("CUDA plan: shape " + std::to_string(index) +
                        " of the shape table: a launch size past 32 bits");
  p.device_name = base.device_name;
  p.arch = base.arch;
  p.sm_count = base.sm_count;
  p.precision = base.precision;
  p.workspace_bytes = base.workspace_bytes;
  p.kernel_names = base.kernel_names;
  KILN_TRY(p.validate().with_context("shape " + std::to_string(index) + " of the shape table"));
  return p;
}

}  // namespace kiln::cuda
