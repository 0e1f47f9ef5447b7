#include "backends/cuda/cuda_plan.h"

#include <nlohmann/json.hpp>

namespace kiln::cuda {

namespace {

using nlohmann::json;

int64_t bytes_of(DType t, const std::vector<int64_t>& sizes) {
  int64_t n = static_cast<int64_t>(dtype_size(t));
  for (int64_t s : sizes) n *= s;
  return n;
}

json ref_json(const BufferRef& r) { return json::array({r.region, r.offset}); }
BufferRef ref_from(const json& j) { return {j.at(0).get<int>(), j.at(1).get<int64_t>()}; }

DType dtype_from(const json& j) {
  auto d = dtype_from_name(j.get<std::string>());
  if (!d) throw std::invalid_argument("unknown dtype '" + j.get<std::string>() + "'");
  return *d;
}
std::string dname(DType t) { return std::string(dtype_name(t)); }

json gemm_json(const GemmLaunch& g) {
  const GemmShape& s = g.shape;
  json j = {{"dtype", dname(s.dtype)},
            {"tf32", s.allow_tf32},
            {"m", s.m},
            {"n", s.n},
            {"k", s.k},
            {"batch", s.batch},
            {"trans_a", s.trans_a},
            {"trans_b", s.trans_b},
            {"lda", s.lda},
            {"ldb", s.ldb},
            {"ldc", s.ldc},
            {"sa", s.batch_stride_a},
            {"sb", s.batch_stride_b},
            {"sc", s.batch_stride_c},
            {"epilogue", static_cast<int>(s.epilogue)},
            {"alpha", s.alpha},
            {"beta", s.beta},
            {"algo", g.algo.data},
            {"workspace", g.algo.workspace_bytes},
            {"ms", g.algo.measured_ms},
            {"candidates", g.algo.candidates},
            {"a", ref_json(g.a)},
            {"b", ref_json(g.b)},
            {"c", ref_json(g.c)},
            {"has_bias", g.has_bias},
            {"bias", ref_json(g.bias)}};
  return j;
}

GemmLaunch gemm_from(const json& j) {
  GemmLaunch g;
  GemmShape& s = g.shape;
  s.dtype = dtype_from(j.at("dtype"));
  s.allow_tf32 = j.at("tf32").get<bool>();
  s.m = j.at("m").get<int64_t>();
  s.n = j.at("n").get<int64_t>();
  s.k = j.at("k").get<int64_t>();
  s.batch = j.at("batch").get<int64_t>();
  s.trans_a = j.at("trans_a").get<bool>();
  s.trans_b = j.at("trans_b").get<bool>();
  s.lda = j.at("lda").get<int64_t>();
  s.ldb = j.at("ldb").get<int64_t>();
  s.ldc = j.at("ldc").get<int64_t>();
  s.batch_stride_a = j.at("sa").get<int64_t>();
  s.batch_stride_b = j.at("sb").get<int64_t>();
  s.batch_stride_c = j.at("sc").get<int64_t>();
  const int ep = j.at("epilogue").get<int>();
  if (ep < 0 || ep > static_cast<int>(GemmEpilogue::kBiasGelu)) throw std::invalid_argument("bad epilogue");
  s.epilogue = static_cast<GemmEpilogue>(ep);
  s.alpha = j.at("alpha").get<float>();
  s.beta = j.at("beta").get<float>();
  g.algo.data = j.at("algo").get<std::array<uint64_t, 8>>();
  g.algo.workspace_bytes = j.at("workspace").get<size_t>();
  g.algo.measured_ms = j.at("ms").get<float>();
  g.algo.candidates = j.at("candidates").get<int>();
  g.a = ref_from(j.at("a"));
  g.b = ref_from(j.at("b"));
  g.c = ref_from(j.at("c"));
  g.has_bias = j.at("has_bias").get<bool>();
  g.bias = ref_from(j.at("bias"));
  return g;
}

json conv_json(const ConvLaunch& c) {
  const ConvShape& s = c.shape;
  return {{"dtype", dname(s.dtype)},
          {"tf32", s.allow_tf32},
          {"nchw", {s.n, s.c, s.h, s.w}},
          {"krs", {s.k, s.r, s.s}},
          {"groups", s.groups},
          {"stride", {s.stride_h, s.stride_w}},
          {"pad", {s.pad_h, s.pad_w}},
          {"dilation", {s.dilation_h, s.dilation_w}},
          {"out", {s.out_h, s.out_w}},
          {"channels_last", s.channels_last},
          {"has_bias", s.has_bias},
          {"has_residual", s.has_residual},
          {"act", static_cast<int>(s.act)},
          {"algo", c.algo.algo},
          {"workspace", c.algo.workspace_bytes},
          {"ms", c.algo.measured_ms},
          {"x", ref_json(c.x)},
          {"w", ref_json(c.w)},
          {"bias", ref_json(c.bias)},
          {"z", ref_json(c.z)},
          {"y", ref_json(c.y)}};
}

ConvLaunch conv_from(const json& j) {
  ConvLaunch c;
  ConvShape& s = c.shape;
  s.dtype = dtype_from(j.at("dtype"));
  s.allow_tf32 = j.at("tf32").get<bool>();
  const auto nchw = j.at("nchw").get<std::array<int64_t, 4>>();
  s.n = nchw[0], s.c = nchw[1], s.h = nchw[2], s.w = nchw[3];
  const auto krs = j.at("krs").get<std::array<int64_t, 3>>();
  s.k = krs[0], s.r = krs[1], s.s = krs[2];
  s.groups = j.at("groups").get<int64_t>();
  const auto st = j.at("stride").get<std::array<int64_t, 2>>();
  const auto pd = j.at("pad").get<std::array<int64_t, 2>>();
  const auto dl = j.at("dilation").get<std::array<int64_t, 2>>();
  const auto out = j.at("out").get<std::array<int64_t, 2>>();
  s.stride_h = st[0], s.stride_w = st[1], s.pad_h = pd[0], s.pad_w = pd[1];
  s.dilation_h = dl[0], s.dilation_w = dl[1], s.out_h = out[0], s.out_w = out[1];
  s.channels_last = j.at("channels_last").get<bool>();
  s.has_bias = j.at("has_bias").get<bool>();
  s.has_residual = j.at("has_residual").get<bool>();
  const int act = j.at("act").get<int>();
  if (act < 0 || act > static_cast<int>(ConvActivation::kRelu)) throw std::invalid_argument("bad activation");
  s.act = static_cast<ConvActivation>(act);
  c.algo.algo = j.at("algo").get<int>();
  c.algo.workspace_bytes = j.at("workspace").get<size_t>();
  c.algo.measured_ms = j.at("ms").get<float>();
  c.x = ref_from(j.at("x"));
  c.w = ref_from(j.at("w"));
  c.bias = ref_from(j.at("bias"));
  c.z = ref_from(j.at("z"));
  c.y = ref_from(j.at("y"));
  return c;
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
  if (padded_channels > 0 && sizes.size() == 4) return bytes_of(dtype, {sizes[0], padded_channels, sizes[2], sizes[3]});
  return bytes_of(dtype, sizes);
}
int64_t IoSlot::nbytes() const { return bytes_of(dtype, sizes); }

std::string CudaPlan::to_json() const {
  json j;
  j["device"] = device_name;
  j["arch"] = arch;
  j["sm_count"] = sm_count;
  j["precision"] = precision;
  j["arena_bytes"] = arena_bytes;
  j["error_offset"] = error_offset;
  j["error_layers"] = error_layers;
  j["workspace_bytes"] = workspace_bytes;
  json cs = json::array();
  for (const auto& c : constants)
    cs.push_back({{"name", c.name},
                  {"dtype", dname(c.dtype)},
                  {"sizes", c.sizes},
                  {"channels_last", c.channels_last},
                  {"transposed", c.transposed},
                  {"padded_channels", c.padded_channels}});
  j["constants"] = cs;
  json ins = json::array(), outs = json::array();
  for (const auto& s : inputs) ins.push_back(io_json(s));
  for (const auto& s : outputs) outs.push_back(io_json(s));
  j["inputs"] = ins;
  j["outputs"] = outs;
  j["kernels"] = kernel_names;
  json steps_j = json::array();
  for (const Step& s : steps) {
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
        break;
      }
      case Step::Kind::kGemm: sj["gemm"] = gemm_json(s.gemm); break;
      case Step::Kind::kConv: sj["conv"] = conv_json(s.conv); break;
    }
    steps_j.push_back(std::move(sj));
  }
  j["steps"] = steps_j;
  return j.dump();
}

Expected<CudaPlan> CudaPlan::from_json(std::string_view text, std::span<const uint8_t> cubin) {
  CudaPlan p;
  try {
    const json j = json::parse(text);
    p.device_name = j.at("device").get<std::string>();
    p.arch = j.at("arch").get<std::string>();
    p.sm_count = j.at("sm_count").get<int>();
    p.precision = j.at("precision").get<std::string>();
    p.arena_bytes = j.at("arena_bytes").get<int64_t>();
    p.error_offset = j.at("error_offset").get<int64_t>();
    p.error_layers = j.at("error_layers").get<std::vector<std::string>>();
    p.workspace_bytes = j.at("workspace_bytes").get<size_t>();
    for (const json& c : j.at("constants"))
      p.constants.push_back({c.at("name").get<std::string>(), dtype_from(c.at("dtype")),
                             c.at("sizes").get<std::vector<int64_t>>(), c.at("channels_last").get<bool>(),
                             c.value("transposed", false), c.value("padded_channels", int64_t{0})});
    for (const json& s : j.at("inputs")) p.inputs.push_back(io_from(s));
    for (const json& s : j.at("outputs")) p.outputs.push_back(io_from(s));
    p.kernel_names = j.at("kernels").get<std::vector<std::string>>();
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
      } else if (sj.contains("gemm")) {
        s.kind = Step::Kind::kGemm;
        s.gemm = gemm_from(sj.at("gemm"));
      } else if (sj.contains("conv")) {
        s.kind = Step::Kind::kConv;
        s.conv = conv_from(sj.at("conv"));
      } else {
        return format_error("CUDA plan: step for layer '" + s.layer + "' has no kernel, gemm or conv");
      }
      p.steps.push_back(std::move(s));
    }
  } catch (const std::exception& e) {
    return format_error(std::string("CUDA plan: malformed JSON: ") + e.what());
  }
  p.cubin.assign(cubin.begin(), cubin.end());
  KILN_TRY(p.validate());
  return p;
}

Status CudaPlan::validate() const {
  if (arena_bytes < 8 || error_offset < 0 || error_offset + 4 > arena_bytes || error_offset % 4 != 0)
    return format_error("CUDA plan: arena of " + std::to_string(arena_bytes) + " bytes with error word at " +
                        std::to_string(error_offset));
  auto check_ref = [&](const BufferRef& r, int64_t nbytes, const std::string& where) -> Status {
    if (nbytes < 0) return format_error("CUDA plan: " + where + ": negative size");
    if (r.region == kArenaRegion) {
      if (r.offset < 0 || r.offset > arena_bytes || nbytes > arena_bytes - r.offset)
        return format_error(FileFault::kOutOfBounds, "CUDA plan: " + where + ": arena offset " + std::to_string(r.offset) +
                            " is outside the arena of " + std::to_string(arena_bytes) + " bytes");
      return Status::ok();
    }
    if (r.region < 0 || static_cast<size_t>(r.region) >= constants.size())
      return format_error(FileFault::kDanglingReference, "CUDA plan: " + where + ": constant " + std::to_string(r.region) + " does not exist");
    if (r.offset < 0 || r.offset > constants[static_cast<size_t>(r.region)].nbytes())
      return format_error(FileFault::kOutOfBounds, "CUDA plan: " + where + ": offset past the end of constant '" +
                          constants[static_cast<size_t>(r.region)].name + "'");
    return Status::ok();
  };
  for (const auto& c : constants) {
    for (int64_t s : c.sizes)
      if (s < 0 || s > (int64_t{1} << 40)) return format_error("CUDA plan: constant '" + c.name + "' has a bad size");
    if (c.channels_last && c.sizes.size() != 4)
      return format_error("CUDA plan: channels-last constant '" + c.name + "' is not 4-D");
    if (c.transposed && (c.sizes.size() != 2 || c.channels_last))
      return format_error("CUDA plan: transposed constant '" + c.name + "' is not a 2-D matrix");
    if (c.padded_channels != 0 &&
        (!c.channels_last || c.padded_channels < c.sizes[1] || c.padded_channels > (int64_t{1} << 20)))
      return format_error("CUDA plan: constant '" + c.name + "' pads " + std::to_string(c.padded_channels) +
                          " channels, which is not a channels-last filter's channel count or more");
  }
  for (const auto* list : {&inputs, &outputs})
    for (const IoSlot& s : *list) {
      for (int64_t d : s.sizes)
        if (d < 0 || d > (int64_t{1} << 40)) return format_error("CUDA plan: slot '" + s.name + "' has a bad size");
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
        if (s.kernel.block[0] * s.kernel.block[1] * s.kernel.block[2] > 1024 || s.kernel.block[0] == 0)
          return format_error("CUDA plan: " + where + ": bad block size");
        for (const auto& a : s.kernel.args) KILN_TRY(check_ref(a, 0, where));
        break;
      case Step::Kind::kGemm:
        KILN_TRY(s.gemm.shape.validate().with_context(where));
        for (const auto* r : {&s.gemm.a, &s.gemm.b, &s.gemm.c, &s.gemm.bias}) KILN_TRY(check_ref(*r, 0, where));
        if (s.gemm.algo.workspace_bytes > workspace_bytes)
          return format_error("CUDA plan: " + where + ": workspace larger than the engine's");
        break;
      case Step::Kind::kConv:
        KILN_TRY(s.conv.shape.validate().with_context(where));
        for (const auto* r : {&s.conv.x, &s.conv.w, &s.conv.bias, &s.conv.z, &s.conv.y})
          KILN_TRY(check_ref(*r, 0, where));
        if (s.conv.algo.workspace_bytes > workspace_bytes)
          return format_error("CUDA plan: " + where + ": workspace larger than the engine's");
        break;
    }
  }
  return Status::ok();
}

}  // namespace kiln::cuda
