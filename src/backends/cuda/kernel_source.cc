#include "backends/cuda/kernel_source.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <sstream>

namespace kiln::cuda {

namespace {

using ir::OpKind;

constexpr uint32_t kThreads = 256;


// The sizes a kernel's text reads: each is written as KD(i) and its value
// kept, for kernel_definition() to make a literal or a run-time value.
struct Sizes {
  std::vector<int64_t> values;
  std::string operator()(int64_t v) {
    values.push_back(v);
    return "KD(" + std::to_string(values.size() - 1) + ")";
  }
  // The same as a 32-bit int (for 32-bit index arithmetic).
  std::string i32(int64_t v) { return "((int)" + (*this)(v) + ")"; }
};

bool is_float_type(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

// The compute type of a floating storage type.
std::string compute_type(DType t) { return t == DType::Float64 ? "double" : "float"; }

// An exact literal of `v` in the compute type of `t` (bit patterns keep inf, nan and every digit).
std::string literal(double v, DType t) {
  char buf[64];
  if (t == DType::Float64) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016" PRIx64 "LL)", bits);
  } else {
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    std::snprintf(buf, sizeof buf, "__int_as_float(0x%08x)", bits);
  }
  return buf;
}

// The bits of `v` in the compute type of `t` (a float's 32, a double's 64),
// as a size a kernel template reads its number from (row_number in kiln/rows.cuh).
int64_t number_bits(double v, DType t) {
  if (t == DType::Float64) return std::bit_cast<int64_t>(v);
  return static_cast<int64_t>(std::bit_cast<uint32_t>(static_cast<float>(v)));
}

// `v` stored into dtype t and read back (what the CPU kernels do to a Python number
// they convert to the tensor's dtype first).
double rounded_to(double v, DType t) {
  switch (t) {
    case DType::Float32: return static_cast<float>(v);
    case DType::Float16: return static_cast<float>(Half(static_cast<float>(v)));
    case DType::BFloat16: return static_cast<float>(BFloat16(static_cast<float>(v)));
    default: return v;
  }
}

uint32_t blocks_for(int64_t n, uint32_t threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<uint32_t>(std::clamp<int64_t>(b, 1, 65535LL * 16));
}

// Dims of a loop over `sizes` (row-major) with several tensors' strides, with
// size-1 dims dropped and neighbours merged where every tensor allows it.
// Result innermost first.
struct Loop {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;  // per tensor
};

Loop coalesce(const std::vector<int64_t>& sizes, const std::vector<const std::vector<int64_t>*>& strides) {
  Loop loop;
  loop.strides.resize(strides.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    bool merge = !loop.sizes.empty();
    for (size_t k = 0; k < strides.size() && merge; ++k)
      merge = (*strides[k])[d] == loop.strides[k].back() * loop.sizes.back();
    if (merge) {
      loop.sizes.back() *= sizes[d];
      continue;
    }
    loop.sizes.push_back(sizes[d]);
    for (size_t k = 0; k < strides.size(); ++k) loop.strides[k].push_back((*strides[k])[d]);
  }
  if (loop.sizes.empty()) {
    loop.sizes = {1};
    for (auto& s : loop.strides) s = {0};
  }
  return loop;
}

// The index type for a loop: 32-bit when every index and offset fits (integer
// division by the baked-in sizes is much cheaper), else 64-bit.
std::string index_type(const Loop& loop, int64_t n) {
  int64_t most = n;
  for (const auto& st : loop.strides) {
    int64_t extent = 0;
    for (size_t d = 0; d < loop.sizes.size(); ++d) extent += (loop.sizes[d] - 1) * (st[d] < 0 ? -st[d] : st[d]);
    most = std::max(most, extent + 1);
  }
  // Headroom for the grid-stride step (at most 2^28 threads) so i never overflows.
  return most < (int64_t{1} << 31) - (int64_t{1} << 29) ? "int" : "long long";
}

// Code computing offsets o0..o{n-1} of linear index `i` over `loop`, in type `t`.
std::string offsets_code(const Loop& loop, Sizes& D, const std::string& i, const std::string& t = "long long") {
  std::ostringstream c;
  const size_t n = loop.strides.size();
  const bool narrow = t == "int";
  auto lit = [&](int64_t v) { return narrow ? D.i32(v) : D(v); };
  for (size_t k = 0; k < n; ++k) c << "    " << t << " o" << k << " = 0;\n";
  c << "    " << t << " r = " << i << ";\n";
  for (size_t d = 0; d < loop.sizes.size(); ++d) {
    const bool last = d + 1 == loop.sizes.size();
    const std::string idx = last ? "r" : "(r % " + lit(loop.sizes[d]) + ")";
    c << "    { " << t << " x = " << idx << ";";
    for (size_t k = 0; k < n; ++k)
      if (loop.strides[k][d] != 0) c << " o" << k << " += x * " << lit(loop.strides[k][d]) << ";";
    if (!last) c << " r /= " << lit(loop.sizes[d]) << ";";
    c << " }\n";
  }
  return c.str();
}

// The opening of an elementwise kernel's body: a grid-stride loop over `n`
// elements (index i, in index_type's type) and the offsets o0.. of each
// tensor of `loop` at i. The caller writes the body and closes the loop.
std::string grid_stride_loop(const Loop& loop, int64_t n, Sizes& D) {
  const std::string it = index_type(loop, n);
  std::ostringstream s;
  s << "  for (" << it << " i = (" << it << ")blockIdx.x * " << kThreads << " + threadIdx.x; i < "
    << (it == "int" ? D.i32(n) : D(n)) << "; i += (" << it << ")gridDim.x * " << kThreads << ") {\n";
  s << offsets_code(loop, D, "i", it);
  return s.str();
}

Status check_layout(const StridedLayout& t, const char* what) {
  if (t.sizes.size() != t.strides.size())
    return invalid_argument(std::string(what) + ": " + std::to_string(t.sizes.size()) + " sizes but " +
                            std::to_string(t.strides.size()) + " strides");
  return Status::ok();
}

// The expression one instruction computes, in compute type C, reading registers v<k>.
Expected<std::string> instr_expr(const engine::ElementwiseInstr& in, DType t) {
  auto reg = [&](size_t k) { return "v" + std::to_string(in.operands.at(k)); };
  const std::string C = compute_type(t);
  auto lit = [&](double v) { return literal(v, t); };
  const std::string a = reg(0);
  const std::string b = in.operands.size() > 1 ? reg(1) : "";
  auto alpha_term = [&](const std::string& x) -> std::string {
    const double al = rounded_to(in.scalars.at(0), t);
    return al == 1.0 ? x : "(" + lit(al) + " * " + x + ")";
  };
  switch (in.op) {
    case OpKind::kAddTensor: return a + " + " + alpha_term(b);
    case OpKind::kSubTensor: return a + " - " + alpha_term(b);
    case OpKind::kAddScalar:
    case OpKind::kSubScalar:
    case OpKind::kRsubScalar: {
      const double k = rounded_to(in.scalars.at(0), t);
      const double al = rounded_to(in.scalars.at(1), t);
      const std::string term = al == 1.0 ? lit(k) : lit(static_cast<double>(al * k));
      if (in.op == OpKind::kAddScalar) return a + " + " + term;
      if (in.op == OpKind::kSubScalar) return a + " - " + term;
      return al == 1.0 ? lit(k) + " - " + a : lit(k) + " - " + lit(al) + " * " + a;
    }
    case OpKind::kMulTensor: return a + " * " + b;
    case OpKind::kMulScalar: return a + " * " + lit(in.scalars.at(0));
    case OpKind::kDivTensor: return a + " / " + b;
    case OpKind::kDivScalar: return a + " / " + lit(in.scalars.at(0));
    case OpKind::kPowTensorScalar: {
      const double e = in.scalars.at(0);
      if (e == 2.0) return a + " * " + a;
      if (e == 3.0) return a + " * " + a + " * " + a;
      if (e == 0.5) return "sqrt(" + a + ")";
      if (e == -0.5) return C + "(1) / sqrt(" + a + ")";
      if (e == -1.0) return C + "(1) / " + a;
      if (e == -2.0) return C + "(1) / (" + a + " * " + a + ")";
      return "pow(" + a + ", " + lit(rounded_to(e, t)) + ")";
    }
    case OpKind::kNeg: return "-" + a;
    case OpKind::kAbs: return "fabs(" + a + ")";
    case OpKind::kExp: return "exp(" + a + ")";
    case OpKind::kLog: return "log(" + a + ")";
    case OpKind::kSqrt: return "sqrt(" + a + ")";
    case OpKind::kRsqrt: return C + "(1) / sqrt(" + a + ")";
    case OpKind::kReciprocal: return C + "(1) / " + a;
    case OpKind::kSin: return "sin(" + a + ")";
    case OpKind::kCos: return "cos(" + a + ")";
    case OpKind::kTanh: return "tanh(" + a + ")";
    case OpKind::kErf: return "erf(" + a + ")";
    case OpKind::kLog1p: return "log1p(" + a + ")";
    case OpKind::kExpm1: return "expm1(" + a + ")";
    case OpKind::kFloor: return "floor(" + a + ")";
    case OpKind::kCeil: return "ceil(" + a + ")";
    case OpKind::kTrunc: return "trunc(" + a + ")";
    case OpKind::kRound: return "rint(" + a + ")";
    case OpKind::kSign: return C + "((" + C + "(0) < " + a + ") - (" + a + " < " + C + "(0)))";
    case OpKind::kMinimum: return "((" + a + " < " + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
    case OpKind::kMaximum: return "((" + a + " > " + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
    case OpKind::kAtan2: return "atan2(" + a + ", " + b + ")";
    case OpKind::kHypot: return "hypot(" + a + ", " + b + ")";
    case OpKind::kSigmoid: return C + "(1) / (" + C + "(1) + exp(-" + a + "))";
    case OpKind::kSilu: return a + " / (" + C + "(1) + exp(-" + a + "))";
    case OpKind::kHardswish:
      return a + " * kiln_min(kiln_max(" + a + " + " + C + "(3), " + C + "(0)), " + C + "(6)) / " + C + "(6)";
    case OpKind::kHardsigmoid:
      return "kiln_min(kiln_max(" + a + " + " + C + "(3), " + C + "(0)), " + C + "(6)) / " + C + "(6)";
    case OpKind::kSiluMul: return "kiln_round<T>(" + a + " / (" + C + "(1) + exp(-" + a + "))) * " + b;
    case OpKind::kGelu:
      if (in.mode == "tanh")
        return C + "(0.5) * " + a + " * (" + C + "(1) + tanh(" + lit(0.7978845608028654) + " * (" + a + " + " +
               lit(0.044715) + " * " + a + " * " + a + " * " + a + ")))";
      return a + " * " + C + "(0.5) * (" + C + "(1) + erf(" + a + " * " + lit(0.7071067811865476) + "))";
    case OpKind::kRelu: return "kiln_clamp_lo(" + a + ", " + C + "(0))";
    case OpKind::kClampMin: return "kiln_clamp_lo(" + a + ", " + lit(rounded_to(in.scalars.at(0), t)) + ")";
    case OpKind::kClamp:
    case OpKind::kHardtanh: {
      std::string e = a;
      if (!std::isinf(in.scalars.at(0)) || in.scalars.at(0) > 0)
        e = "kiln_clamp_lo(" + e + ", " + lit(rounded_to(in.scalars.at(0), t)) + ")";
      if (!std::isinf(in.scalars.at(1)) || in.scalars.at(1) < 0)
        e = "kiln_clamp_hi(" + e + ", " + lit(rounded_to(in.scalars.at(1), t)) + ")";
      return e;
    }
    default: break;
  }
  return unsupported(std::string("no CUDA code for elementwise op ") + std::string(ir::op_target(in.op)));
}

GeneratedKernel launch_1d(std::string source, int64_t n, Sizes& D) {
  GeneratedKernel k;
  k.source = std::move(source);
  k.dims = std::move(D.values);
  k.grid = {blocks_for(n), 1, 1};
  k.block = {kThreads, 1, 1};
  return k;
}

// A template kernel of a 256-thread grid-stride loop over n elements.
GeneratedKernel template_1d(std::string header, std::string templ, std::vector<std::string> targs,
                            std::vector<int64_t> dims, int64_t n) {
  GeneratedKernel k;
  k.header = std::move(header);
  k.templ = std::move(templ);
  k.targs = std::move(targs);
  k.dims = std::move(dims);
  k.grid = {blocks_for(n), 1, 1};
  k.block = {kThreads, 1, 1};
  return k;
}

// A kernel of kiln/strided.cuh over out's elements: out and `inputs` (at
// out's sizes) walked by one coalesced loop; the template's arguments are
// `targs`, then the index type and the loop's rank; its sizes n, the loop's,
// each tensor's strides, then `extra`.
GeneratedKernel strided_kernel(std::string templ, std::vector<std::string> targs, const StridedLayout& out,
                               const std::vector<const StridedLayout*>& inputs,
                               const std::vector<int64_t>& extra = {}) {
  std::vector<const std::vector<int64_t>*> strides{&out.strides};
  for (const StridedLayout* l : inputs) strides.push_back(&l->strides);
  const int64_t n = out.numel();
  const Loop loop = coalesce(out.sizes, strides);
  targs.push_back(index_type(loop, n));
  targs.push_back(std::to_string(loop.sizes.size()));
  std::vector<int64_t> dims{n};
  dims.insert(dims.end(), loop.sizes.begin(), loop.sizes.end());
  for (const std::vector<int64_t>& st : loop.strides) dims.insert(dims.end(), st.begin(), st.end());
  dims.insert(dims.end(), extra.begin(), extra.end());
  return template_1d("kiln/strided.cuh", std::move(templ), std::move(targs), std::move(dims), n);
}

// kiln::CompareOp of a comparison operator's text, or -1.
int compare_code(const std::string& op) {
  static const std::string kOps[] = {"<", "<=", ">", ">=", "==", "!="};
  for (int k = 0; k < 6; ++k)
    if (op == kOps[k]) return k;
  return -1;
}

}  // namespace

int64_t StridedLayout::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool StridedLayout::is_contiguous() const {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

const std::string& kernel_prelude() {
  static const std::string prelude = "#include \"kiln/prelude.cuh\"\n";
  return prelude;
}

std::string GeneratedKernel::identity() const {
  if (!is_template()) return source;
  std::string id = header + ":" + templ + "<";
  for (size_t i = 0; i < targs.size(); ++i) id += (i ? ", " : "") + targs[i];
  return id + ">";
}

Expected<std::string> kernel_instance(const GeneratedKernel& k, const std::vector<bool>& runtime) {
  if (!k.is_template()) return invalid_argument("kernel_instance: a kernel written as text");
  uint64_t mask = 0;
  for (size_t i = 0; i < k.dims.size() && i < runtime.size(); ++i) {
    if (!runtime[i]) continue;
    if (i >= kMaxKernelDims)
      return invalid_argument(k.templ + " reads " + std::to_string(k.dims.size()) + " sizes; at most the first " +
                              std::to_string(kMaxKernelDims) + " can be run-time values");
    mask |= uint64_t{1} << i;
  }
  std::ostringstream s;
  s << k.templ << "<";
  for (const std::string& a : k.targs) s << a << ", ";
  s << "kiln::Sizes<0x" << std::hex << mask << std::dec << "ULL";
  for (size_t i = 0; i < k.dims.size(); ++i) {
    const bool rt = i < runtime.size() && runtime[i];
    const int64_t v = rt ? 0 : k.dims[i];  // a run-time size's literal is never read
    if (v == INT64_MIN) {
      s << ", (-9223372036854775807LL - 1)";
    } else {
      s << ", " << v << "LL";
    }
  }
  s << ">" << (mask != 0 ? ", KilnDims" : "") << ">";
  return s.str();
}

Expected<std::string> kernel_definition(const GeneratedKernel& k, const std::string& name,
                                        const std::vector<bool>& runtime) {
  if (k.is_template()) return invalid_argument("kernel_definition: " + k.templ + " is a template (kernel_instance)");
  bool any = false;
  for (size_t i = 0; i < k.dims.size(); ++i) {
    if (i >= runtime.size() || !runtime[i]) continue;
    if (i >= kMaxKernelDims)
      return invalid_argument("kernel " + name + " reads " + std::to_string(k.dims.size()) +
                              " sizes; at most the first " + std::to_string(kMaxKernelDims) + " can be run-time values");
    any = true;
  }
  std::ostringstream s;
  s << "#define KILN_KERNEL " << name << "\n#define KILN_DIMS" << (any ? " , const KilnDims kd" : "")
    << "\n#define KD(i) KILN_KD_##i\n";
  for (size_t i = 0; i < k.dims.size(); ++i) {
    s << "#define KILN_KD_" << i << " ";
    const int64_t v = k.dims[i];
    if (i < runtime.size() && runtime[i]) {
      s << "kd.v[" << i << "]\n";
    } else if (v == INT64_MIN) {
      s << "(-9223372036854775807LL - 1)\n";
    } else {
      s << "(" << v << "LL)\n";
    }
  }
  s << k.source;
  s << "#undef KILN_KERNEL\n#undef KILN_DIMS\n#undef KD\n";
  for (size_t i = 0; i < k.dims.size(); ++i) s << "#undef KILN_KD_" << i << "\n";
  return s.str();
}

Expected<std::string> device_type_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return std::string("float");
    case DType::Float64: return std::string("double");
    case DType::Float16: return std::string("__half");
    case DType::BFloat16: return std::string("__nv_bfloat16");
    case DType::Int64: return std::string("long long");
    case DType::Int32: return std::string("int");
    case DType::Int16: return std::string("short");
    case DType::Int8: return std::string("signed char");
    case DType::UInt8: return std::string("unsigned char");
    case DType::Bool: return std::string("bool");
    case DType::Complex64:
    case DType::Complex128: break;
  }
  return unsupported("no CUDA element type for " + std::string(dtype_name(dtype)));
}

Expected<GeneratedKernel> elementwise_kernel(const engine::ElementwiseProgram& program, const StridedLayout& out,
                                             const std::vector<StridedLayout>& inputs) {
  KILN_TRY(program.validate());
  KILN_TRY(check_layout(out, "output"));
  if (!is_float_type(out.dtype)) return unsupported("elementwise programs compute in floating types");
  if (inputs.size() != static_cast<size_t>(program.num_inputs))
    return invalid_argument("the program reads " + std::to_string(program.num_inputs) + " inputs, got " +
                            std::to_string(inputs.size()));
  std::vector<const std::vector<int64_t>*> strides{&out.strides};
  for (size_t k = 0; k < inputs.size(); ++k) {
    KILN_TRY(check_layout(inputs[k], "input"));
    if (inputs[k].dtype != out.dtype || inputs[k].sizes.size() != out.sizes.size())
      return invalid_argument("elementwise input " + std::to_string(k) + " does not match the output's dtype and rank");
    strides.push_back(&inputs[k].strides);
  }
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(out.dtype));
  const std::string C = compute_type(out.dtype);
  const int64_t n = out.numel();
  const Loop loop = coalesce(out.sizes, strides);
  Sizes D;
  std::ostringstream s;
  s << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") KILN_KERNEL(" << T << "* __restrict__ out";
  for (size_t k = 0; k < inputs.size(); ++k) s << ", const " << T << "* __restrict__ in" << k;
  s << " KILN_DIMS) {\n  typedef " << T << " T;\n  kiln_enter_after_prior_grid();\n";
  // The program on registers v0.. (the inputs), leaving its result in the last one.
  std::ostringstream body;
  int reg = program.num_inputs;
  for (const auto& in : program.instrs) {
    KILN_ASSIGN_OR_RETURN(std::string e, instr_expr(in, out.dtype));
    body << "    const " << C << " v" << reg << " = kiln_round<T>((" << C << ")(" << e << "));\n";
    ++reg;
  }
  const std::string result = "v" + std::to_string(reg - 1);
  const std::string store = out.dtype == DType::Float64 ? result : "kiln_st<T>(" + result + ")";
  // Every tensor contiguous over the same elements: 16 bytes per load and
  // store when the pointers allow it (checked at run time; else the loop below).
  bool flat = loop.sizes.size() == 1 && out.dtype != DType::Float64;
  for (const std::vector<int64_t>& st : loop.strides) flat = flat && st.size() == 1 && st[0] == 1;
  const int64_t per_vector = 16 / static_cast<int64_t>(dtype_size(out.dtype));
  const bool vectors = flat && n % per_vector == 0 && n / per_vector > 0;
  if (vectors) {
    s << "  if (((unsigned long long)out";
    for (size_t k = 0; k < inputs.size(); ++k) s << " | (unsigned long long)in" << k;
    s << ") % 16 == 0) {\n";
    s << "    for (long long w = (long long)blockIdx.x * " << kThreads << " + threadIdx.x; w < " << D(n / per_vector)
      << "; w += (long long)gridDim.x * " << kThreads << ") {\n";
    for (size_t k = 0; k < inputs.size(); ++k)
      s << "      const uint4 r" << k << " = reinterpret_cast<const uint4*>(in" << k << ")[w];\n";
    s << "      uint4 rw;\n#pragma unroll\n      for (int u = 0; u < " << per_vector << "; ++u) {\n";
    for (size_t k = 0; k < inputs.size(); ++k)
      s << "    const " << C << " v" << k << " = kiln_ld(reinterpret_cast<const T*>(&r" << k << ")[u]);\n";
    s << body.str();
    s << "        reinterpret_cast<T*>(&rw)[u] = " << store << ";\n      }\n";
    s << "      reinterpret_cast<uint4*>(out)[w] = rw;\n    }\n    return;\n  }\n";
  }
  s << grid_stride_loop(loop, n, D);
  for (size_t k = 0; k < inputs.size(); ++k)
    s << "    const " << C << " v" << k << " = kiln_ld(in" << k << "[o" << (k + 1) << "]);\n";
  s << body.str();
  s << "    out[o0] = " << store << ";\n";
  s << "  }\n}\n";
  GeneratedKernel k = launch_1d(s.str(), n, D);
  if (vectors) k.grid = {blocks_for(n / per_vector), 1, 1};
  return k;
}

std::string compute_literal(double v, DType compute) { return literal(v, compute); }

double rounded_to_dtype(double v, DType t) { return rounded_to(v, t); }

Expected<GeneratedKernel> pointwise_kernel(const std::string& expr, DType compute, const StridedLayout& out,
                                           const std::vector<StridedLayout>& inputs, const std::vector<DType>& via) {
  if (via.size() != inputs.size()) return invalid_argument("pointwise_kernel: one via dtype per input");
  KILN_TRY(check_layout(out, "output"));
  std::string C;
  switch (compute) {
    case DType::Float64: C = "double"; break;
    case DType::Float32: C = "float"; break;
    case DType::Int64: C = "long long"; break;
    case DType::Int32: C = "int"; break;
    default: return invalid_argument("pointwise kernels compute in double, float, long long or int");
  }
  std::vector<const std::vector<int64_t>*> strides{&out.strides};
  std::vector<std::string> types;
  for (size_t k = 0; k < inputs.size(); ++k) {
    KILN_TRY(check_layout(inputs[k], "input"));
    if (inputs[k].sizes != out.sizes)
      return invalid_argument("pointwise input " + std::to_string(k) + " is not at the output's sizes");
    KILN_ASSIGN_OR_RETURN(std::string t, device_type_name(inputs[k].dtype));
    types.push_back(std::move(t));
    strides.push_back(&inputs[k].strides);
  }
  KILN_ASSIGN_OR_RETURN(std::string O, device_type_name(out.dtype));
  const int64_t n = out.numel();
  const Loop loop = coalesce(out.sizes, strides);
  Sizes D;
  std::ostringstream s;
  s << "#include \"kiln/pointwise.cuh\"\n";
  s << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") KILN_KERNEL(" << O << "* __restrict__ out";
  for (size_t k = 0; k < inputs.size(); ++k) s << ", const " << types[k] << "* __restrict__ in" << k;
  s << " KILN_DIMS) {\n  typedef " << C << " C;\n  using namespace kiln;\n  kiln_enter_after_prior_grid();\n";
  s << grid_stride_loop(loop, n, D);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::string load = "in" + std::to_string(k) + "[o" + std::to_string(k + 1) + "]";
    if (via[k] == inputs[k].dtype) {
      s << "    const C a" << k << " = kiln_cvt<C, " << types[k] << ">(" << load << ");\n";
    } else {
      KILN_ASSIGN_OR_RETURN(std::string V, device_type_name(via[k]));
      s << "    const C a" << k << " = kiln_cvt<C, " << V << ">(kiln_cvt<" << V << ", " << types[k] << ">(" << load
        << "));\n";
    }
  }
  s << "    auto result = " << expr << ";\n";
  s << "    out[o0] = kiln_cvt<" << O << ", decltype(result)>(result);\n  }\n}\n";
  return launch_1d(s.str(), n, D);
}

Expected<GeneratedKernel> where_kernel(const StridedLayout& out, const StridedLayout& cond, const StridedLayout& a,
                                       const StridedLayout& b) {
  KILN_TRY(check_layout(out, "output"));
  for (const StridedLayout* l : {&cond, &a, &b}) {
    KILN_TRY(check_layout(*l, "input"));
    if (l->sizes != out.sizes) return invalid_argument("where takes its operands at the output's sizes");
  }
  if (cond.dtype != DType::Bool) return invalid_argument("where's condition is not bool");
  for (const StridedLayout* l : {&a, &b})
    if (l->dtype != out.dtype && !(is_float_type(l->dtype) && is_float_type(out.dtype)))
      return invalid_argument("where's values are neither of the output's dtype nor floating like it");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(out.dtype));
  KILN_ASSIGN_OR_RETURN(std::string A, device_type_name(a.dtype));
  KILN_ASSIGN_OR_RETURN(std::string B, device_type_name(b.dtype));
  return strided_kernel("kiln::where", {T, A, B}, out, {&cond, &a, &b});
}

Expected<GeneratedKernel> compare_kernel(const std::string& op, const StridedLayout& out, const StridedLayout& a,
                                         const StridedLayout* b, double scalar) {
  const int code = compare_code(op);
  if (code < 0) return unsupported("comparison operator '" + op + "'");
  KILN_TRY(check_layout(out, "output"));
  KILN_TRY(check_layout(a, "input"));
  if (b) KILN_TRY(check_layout(*b, "input"));
  if (out.dtype != DType::Bool) return invalid_argument("comparisons give bool");
  for (const StridedLayout* l : {&a, b})
    if (l && (!is_float_type(l->dtype) || l->dtype == DType::Float64 || l->sizes != out.sizes))
      return invalid_argument("floating comparisons take float32, float16 or bfloat16 tensors of the output's sizes");
  KILN_ASSIGN_OR_RETURN(std::string A, device_type_name(a.dtype));
  if (b) {
    KILN_ASSIGN_OR_RETURN(std::string B, device_type_name(b->dtype));
    return strided_kernel("kiln::compare", {A, B, std::to_string(code)}, out, {&a, b});
  }
  // A number is first rounded to the tensor's dtype, as torch converts a Python number to it.
  return strided_kernel("kiln::compare_scalar", {A, std::to_string(code)}, out, {&a},
                        {number_bits(rounded_to(scalar, a.dtype), DType::Float32)});
}

Expected<GeneratedKernel> integer_binary_kernel(const std::string& op, const StridedLayout& out, const StridedLayout& a,
                                                const StridedLayout* b, int64_t scalar, int64_t alpha) {
  const bool arith = op == "+" || op == "-" || op == "*";
  const bool bitwise = op == "&" || op == "|" || op == "^";
  const int compare = compare_code(op);
  if (!arith && !bitwise && compare < 0) return unsupported("integer operator '" + op + "'");
  KILN_TRY(check_layout(out, "output"));
  KILN_TRY(check_layout(a, "input"));
  if (b) KILN_TRY(check_layout(*b, "input"));
  for (const StridedLayout* l : {&a, b})
    if (l && ((l->dtype != DType::Int64 && l->dtype != DType::Int32 && !(bitwise && l->dtype == DType::Bool)) ||
              l->dtype != a.dtype || l->sizes != out.sizes))
      return invalid_argument(
          "integer operations take int64 or int32 tensors (bool too for & | ^) of one dtype and the output's sizes");
  if (compare >= 0 ? out.dtype != DType::Bool : out.dtype != a.dtype)
    return invalid_argument("integer arithmetic gives its inputs' dtype, comparisons give bool");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(out.dtype));
  KILN_ASSIGN_OR_RETURN(std::string I, device_type_name(a.dtype));
  // kiln::IntegerOp: + - * & | ^, then the comparisons from 6 on.
  static const std::string kOps[] = {"+", "-", "*", "&", "|", "^"};
  int code = compare >= 0 ? 6 + compare : 0;
  for (int k = 0; k < 6; ++k)
    if (op == kOps[k]) code = k;
  std::vector<std::string> targs{T, I, std::to_string(code),
                                 alpha == INT64_MIN ? "(-9223372036854775807LL - 1)" : std::to_string(alpha) + "LL"};
  // A number in b's place is a size like the others (a sequence length added to a counter).
  if (b) return strided_kernel("kiln::integer_binary", std::move(targs), out, {&a, b});
  return strided_kernel("kiln::integer_scalar", std::move(targs), out, {&a}, {scalar});
}

Expected<GeneratedKernel> copy_kernel(const StridedLayout& out, const StridedLayout& in) {
  KILN_TRY(check_layout(out, "output"));
  KILN_TRY(check_layout(in, "input"));
  if (out.sizes != in.sizes) return invalid_argument("a copy needs equal sizes on both sides");
  KILN_ASSIGN_OR_RETURN(std::string To, device_type_name(out.dtype));
  KILN_ASSIGN_OR_RETURN(std::string Ti, device_type_name(in.dtype));
  return strided_kernel("kiln::copy", {To, Ti}, out, {&in});
}

Expected<GeneratedKernel> fill_kernel(const StridedLayout& out, double value) {
  KILN_TRY(check_layout(out, "output"));
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(out.dtype));
  const bool floating = is_float_type(out.dtype);
  if (!floating && (!std::isfinite(value) || value != std::trunc(value) || std::fabs(value) > 9.0e15))
    return invalid_argument("a fill of an integer tensor with " + std::to_string(value));
  const int64_t number = floating ? number_bits(value, DType::Float32) : static_cast<int64_t>(value);
  return strided_kernel("kiln::fill", {T, floating ? "true" : "false"}, out, {}, {number});
}

namespace {

// A block per row: 128 threads for rows up to 1024 columns, more for longer ones.
uint32_t row_threads(int64_t cols) { return cols <= 1024 ? 128 : (cols <= 4096 ? 256 : 1024); }

}  // namespace

bool norm_rows_vector_fits(DType dtype, int64_t cols) {
  if (dtype != DType::Float32 && dtype != DType::Float16 && dtype != DType::BFloat16) return false;
  const int64_t per_vector = 16 / static_cast<int64_t>(dtype_size(dtype));
  return cols > 0 && cols % per_vector == 0 && cols / per_vector <= 32 * kNormVectorsPerLane;
}

Expected<GeneratedKernel> norm_rows_kernel(const NormRows& p) {
  if (p.op != RowOp::kLayerNorm && p.op != RowOp::kRmsNorm) return invalid_argument("norm_rows_kernel takes norms");
  if (!is_float_type(p.dtype)) return unsupported("row kernels compute in floating types");
  if (p.write_sum && !p.residual) return invalid_argument("a norm writes its input's sum only when it adds a residual");
  if (p.vectorized && !norm_rows_vector_fits(p.dtype, p.cols))
    return invalid_argument("rows of " + std::to_string(p.cols) + " " + std::string(dtype_name(p.dtype)) +
                            " do not fit one warp's 16-byte vectors");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(p.dtype));
  const std::string kind = p.op == RowOp::kLayerNorm ? "0" : "1";
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  GeneratedKernel k;
  k.header = "kiln/rows.cuh";
  if (!p.vectorized) {
    const uint32_t threads = row_threads(p.cols);
    k.templ = "kiln::norm_rows_block";
    k.targs = {
        T, kind, std::to_string(threads), flag(p.residual), flag(p.write_sum), flag(p.has_weight), flag(p.has_bias)};
    k.dims = {p.cols, number_bits(p.eps, p.dtype)};
    if (p.rows > 2147483647LL) return unsupported("too many rows for one launch");
    k.grid = {static_cast<uint32_t>(std::max<int64_t>(p.rows, 1)), 1, 1};
    k.block = {threads, 1, 1};
    return k;
  }
  const int64_t nvec = p.cols / (16 / static_cast<int64_t>(dtype_size(p.dtype)));
  k.templ = "kiln::norm_rows_warp";
  k.targs = {T, kind, std::to_string(nvec), flag(p.residual), flag(p.write_sum), flag(p.has_weight), flag(p.has_bias)};
  k.dims = {p.cols, p.rows, number_bits(p.eps, p.dtype)};
  if (p.rows > (int64_t{1} << 32)) return unsupported("too many rows for one launch");
  k.grid = {static_cast<uint32_t>(std::max<int64_t>((p.rows + 3) / 4, 1)), 1, 1};
  k.block = {128, 1, 1};
  return k;
}

Expected<GeneratedKernel> row_kernel(RowOp op, DType dtype, int64_t rows, int64_t cols, double eps, bool has_weight,
                                     bool has_bias) {
  if (op == RowOp::kLayerNorm || op == RowOp::kRmsNorm)
    return norm_rows_kernel({op, dtype, rows, cols, eps, has_weight, has_bias});
  if (has_weight || has_bias) return invalid_argument("softmax rows take no weight or bias");
  if (!is_float_type(dtype)) return unsupported("row kernels compute in floating types");
  if (rows > 2147483647LL) return unsupported("too many rows for one launch");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  // A block of up to 1024 threads per row.
  const uint32_t threads = row_threads(cols);
  GeneratedKernel k;
  k.header = "kiln/rows.cuh";
  k.templ = "kiln::softmax_rows";
  k.targs = {T, op == RowOp::kSoftmax ? "2" : "3", std::to_string(threads)};
  k.dims = {cols};
  k.grid = {static_cast<uint32_t>(std::max<int64_t>(rows, 1)), 1, 1};
  k.block = {threads, 1, 1};
  return k;
}

Expected<GeneratedKernel> rotary_kernel(const StridedLayout& out, const StridedLayout& x, const StridedLayout& cos,
                                        const StridedLayout& sin) {
  for (const StridedLayout* t : {&out, &x, &cos, &sin}) {
    KILN_TRY(check_layout(*t, "rotary operand"));
    if (t->dtype != out.dtype || t->sizes != out.sizes)
      return invalid_argument("rotary operands must share the output's dtype and (expanded) sizes");
  }
  if (!is_float_type(out.dtype) || out.dtype == DType::Float64)
    return unsupported("rotary embedding takes float32, float16 or bfloat16");
  if (out.sizes.empty() || out.sizes.back() % 2 != 0) return invalid_argument("rotary needs an even last dim");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(out.dtype));
  const int64_t last = out.sizes.back(), half = last / 2, n = out.numel();
  // Every dim kept apart (innermost first), so the last dim's index is i % last.
  std::vector<int64_t> dims{n};
  for (size_t d = out.sizes.size(); d-- > 0;) dims.push_back(out.sizes[d]);
  for (const StridedLayout* t : {&out, &x, &cos, &sin})
    for (size_t d = out.sizes.size(); d-- > 0;) dims.push_back(t->strides[d]);
  for (int64_t v : {last, half, half * x.strides.back()}) dims.push_back(v);
  return template_1d("kiln/rotary.cuh", "kiln::rotary", {T, std::to_string(out.sizes.size())}, std::move(dims), n);
}

Expected<GeneratedKernel> rms_norm_cast_kernel(DType dtype, int64_t rows, int64_t cols, double eps) {
  if (dtype != DType::Float16 && dtype != DType::BFloat16)
    return unsupported("the cast RMSNorm takes float16 or bfloat16 rows");
  if (rows > 2147483647LL) return unsupported("too many rows for one launch");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  const uint32_t threads = row_threads(cols);
  GeneratedKernel k;
  k.header = "kiln/rows.cuh";
  k.templ = "kiln::rms_norm_cast";
  k.targs = {T, std::to_string(threads)};
  k.dims = {cols, number_bits(eps, DType::Float32)};
  k.grid = {static_cast<uint32_t>(std::max<int64_t>(rows, 1)), 1, 1};
  k.block = {threads, 1, 1};
  return k;
}

Expected<GeneratedKernel> reduce_kernel(ReduceOp op, DType dtype, const ReduceDims& dims) {
  if (!is_float_type(dtype)) return unsupported("reductions on the GPU compute in floating types");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  int64_t n_out = 1, n_red = 1;
  for (int64_t s : dims.kept_sizes) n_out *= s;
  for (int64_t s : dims.reduced_sizes) n_red *= s;
  GeneratedKernel k;
  k.header = "kiln/reduce.cuh";
  k.templ = "kiln::reduce";
  const int kind = op == ReduceOp::kSum    ? 0
                   : op == ReduceOp::kMean ? 1
                   : op == ReduceOp::kMax  ? 2
                   : op == ReduceOp::kMin  ? 3
                                           : 4;
  k.targs = {T, std::to_string(kind), std::to_string(dims.kept_sizes.size()),
             std::to_string(dims.reduced_sizes.size())};
  k.dims = {n_out, n_red};
  for (const std::vector<int64_t>* v :
       {&dims.kept_sizes, &dims.kept_strides, &dims.reduced_sizes, &dims.reduced_strides})
    k.dims.insert(k.dims.end(), v->begin(), v->end());
  // One warp per output element, 8 per block.
  k.grid = {blocks_for(n_out, 8), 1, 1};
  k.block = {256, 1, 1};
  return k;
}

Expected<GeneratedKernel> var_kernel(DType dtype, const ReduceDims& dims, double correction, bool with_mean) {
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, reduce_kernel(ReduceOp::kSum, dtype, dims));
  k.templ = "kiln::reduce_var";
  k.targs = {k.targs[0], k.targs[2], k.targs[3], with_mean ? "true" : "false"};
  k.dims.push_back(std::bit_cast<int64_t>(correction));
  return k;
}

Expected<GeneratedKernel> reduce_int_kernel(ReduceOp op, DType out, DType in, const ReduceDims& dims) {
  if (is_float_type(in) || is_float_type(out)) return unsupported("integer reductions take integer or bool tensors");
  if (op == ReduceOp::kMean) return unsupported("mean of an integer tensor");
  const bool to_int64 = op == ReduceOp::kSum || op == ReduceOp::kProd;
  if (to_int64 && out != DType::Int64) return unsupported("integer sums and products give int64");
  if (!to_int64 && out != in) return unsupported("integer max and min keep the input's dtype");
  KILN_ASSIGN_OR_RETURN(std::string TO, device_type_name(out));
  KILN_ASSIGN_OR_RETURN(std::string TI, device_type_name(in));
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, reduce_kernel(op, DType::Float32, dims));
  k.templ = "kiln::reduce_int";
  k.targs[0] = TI;
  k.targs.insert(k.targs.begin(), TO);
  return k;
}

Expected<GeneratedKernel> arg_reduce_kernel(bool is_max, DType in, const ReduceDims& dims) {
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(in));
  KILN_ASSIGN_OR_RETURN(GeneratedKernel k, reduce_kernel(ReduceOp::kSum, DType::Float32, dims));
  k.templ = "kiln::arg_reduce";
  k.targs[0] = T;
  k.targs[1] = is_max ? "true" : "false";
  return k;
}

Expected<GeneratedKernel> cumsum_kernel(DType out, DType in, int64_t outer, int64_t len, int64_t inner, ScanOp op) {
  const bool floating_in = is_float_type(in);
  if (floating_in ? out != in : out != DType::Int64)
    return unsupported("scans on the GPU keep a floating input's dtype and take integers and bool to int64");
  if (op == ScanOp::kLogSumExp && !floating_in) return unsupported("logcumsumexp of a non-floating tensor");
  KILN_ASSIGN_OR_RETURN(std::string TO, device_type_name(out));
  KILN_ASSIGN_OR_RETURN(std::string TI, device_type_name(in));
  // As torch's CPU kernel accumulates: float for 16-bit floats, double for float32 and float64, wrapping 64 bits for
  // integers.
  const std::string acc = !floating_in                                    ? "unsigned long long"
                          : in == DType::Float16 || in == DType::BFloat16 ? "float"
                                                                          : "double";
  return template_1d("kiln/reduce.cuh", "kiln::cumsum", {TO, TI, acc, std::to_string(static_cast<int>(op))},
                     {outer * inner, len, inner}, outer * inner);
}

Expected<GeneratedKernel> grid_sampler_kernel(DType dtype, DType grid_dtype, const std::vector<int64_t>& in_sizes,
                                              int64_t points, int mode, int padding, bool align_corners) {
  const bool three = in_sizes.size() == 5;
  if (in_sizes.size() != 4 && !three) return unsupported("grid sampling of other than 4-D or 5-D inputs");
  if (!is_float_type(dtype) || !is_float_type(grid_dtype)) return unsupported("grid sampling of non-floating tensors");
  if (mode < 0 || mode > 2 || (three && mode == 2) || padding < 0 || padding > 2)
    return unsupported(
        "a grid sampling mode other than bilinear, nearest, bicubic (2-D) with zeros, border or "
        "reflection padding");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  KILN_ASSIGN_OR_RETURN(std::string G, device_type_name(grid_dtype));
  const int64_t n = in_sizes[0] * in_sizes[1] * points;
  const int64_t d = three ? in_sizes[2] : 1;
  return template_1d(
      "kiln/grid_sample.cuh", "kiln::grid_sampler",
      {T, G, std::to_string(mode), std::to_string(padding), align_corners ? "true" : "false", three ? "true" : "false"},
      {in_sizes[1], d, in_sizes[in_sizes.size() - 2], in_sizes.back(), points, n}, n);
}

Expected<GeneratedKernel> segment_reduce_kernel(DType dtype, int reduce, bool offsets, std::optional<double> initial,
                                                int64_t outer, int64_t len, int64_t inner, int64_t segments,
                                                int error_code) {
  if (!is_float_type(dtype)) return unsupported("segment_reduce of non-floating data");
  if (reduce < 0 || reduce > 4) return unsupported("a segment reduction other than sum, mean, max, min or prod");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  const double init = initial.value_or(0.0);
  int64_t bits = 0;
  std::memcpy(&bits, &init, sizeof init);
  const int64_t n = outer * segments * inner;
  return template_1d(
      "kiln/reduce.cuh", "kiln::segment_reduce",
      {T, std::to_string(reduce), offsets ? "true" : "false", initial ? "true" : "false", std::to_string(error_code)},
      {len, inner, segments, bits, n}, n);
}

Expected<GeneratedKernel> order_kernel(DType dtype, int mode, bool descending, int64_t outer, int64_t len,
                                       int64_t inner, int64_t k) {
  if (len > 2048) return unsupported("ordering slices longer than 2048");
  if (dtype == DType::Bool) return unsupported("ordering bool tensors");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  // Keys: float for float32 and the 16-bit floats, double, and 64-bit integers.
  const std::string key = dtype == DType::Float64 ? "double" : is_float_type(dtype) ? "float" : "long long";
  int64_t p = 2;
  while (p < len) p *= 2;
  const int64_t slices = outer * inner;
  GeneratedKernel g = template_1d("kiln/reduce.cuh", "kiln::order_slices",
                                  {T, key, std::to_string(p), std::to_string(mode), descending ? "true" : "false"},
                                  {len, inner, slices, k}, slices);
  g.grid = {static_cast<uint32_t>(std::clamp<int64_t>(slices, 1, 65535)), 1, 1};
  return g;
}

Expected<GeneratedKernel> pool3d_kernel(const Pool3dParams& p, const StridedLayout& out, const StridedLayout& in,
                                        bool indices) {
  KILN_TRY(check_layout(out, "output"));
  KILN_TRY(check_layout(in, "input"));
  if (out.sizes.size() != 5 || in.sizes.size() != 5) return unsupported("pooling takes 5-D [N, C, D, H, W] views");
  if (!is_float_type(in.dtype) || in.dtype != out.dtype) return unsupported("pooling computes in floating types");
  if (!out.is_contiguous()) return unsupported("pooling writes contiguous outputs");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(in.dtype));
  const int64_t n = out.numel();
  std::vector<std::string> targs{T, std::to_string(static_cast<int>(p.kind))};
  for (const auto* v : {&p.k, &p.stride, &p.pad, &p.dilation})
    for (int64_t x : *v) {
      if (x < 0 || x > (int64_t{1} << 30)) return unsupported("a pooling window, stride, pad or dilation out of range");
      targs.push_back(std::to_string(x));
    }
  targs.push_back(p.count_include_pad ? "true" : "false");
  targs.push_back(std::to_string(p.divisor_override) + "LL");
  std::vector<int64_t> dims{out.sizes[1], out.sizes[2], out.sizes[3], out.sizes[4],
                            in.sizes[2],  in.sizes[3],  in.sizes[4]};
  dims.insert(dims.end(), in.strides.begin(), in.strides.end());
  dims.push_back(n);
  return template_1d("kiln/reduce.cuh", indices ? "kiln::pool3d_indices" : "kiln::pool3d", std::move(targs),
                     std::move(dims), n);
}

Expected<GeneratedKernel> pool2d_kernel(const PoolParams& p, const StridedLayout& out, const StridedLayout& in) {
  KILN_TRY(check_layout(out, "output"));
  KILN_TRY(check_layout(in, "input"));
  if (out.sizes.size() != 4 || in.sizes.size() != 4) return unsupported("pooling takes 4-D [N, C, H, W] tensors");
  if (!is_float_type(in.dtype) || in.dtype != out.dtype) return unsupported("pooling computes in floating types");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(in.dtype));
  const int64_t n = out.numel();
  const int kind = p.kind == PoolParams::Kind::kMax ? 0 : p.kind == PoolParams::Kind::kAvg ? 1 : 2;
  // The channel innermost when the input is channels-last (coalesced reads).
  std::vector<std::string> targs{T, std::to_string(kind), in.strides[1] == 1 ? "true" : "false"};
  for (int64_t v : {p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw}) targs.push_back(std::to_string(v));
  targs.push_back(p.count_include_pad ? "true" : "false");
  targs.push_back(std::to_string(p.divisor_override) + "LL");
  std::vector<int64_t> dims{out.sizes[1], out.sizes[2], out.sizes[3], in.sizes[2], in.sizes[3]};
  dims.insert(dims.end(), in.strides.begin(), in.strides.end());
  dims.push_back(n);
  dims.insert(dims.end(), out.strides.begin(), out.strides.end());
  return template_1d("kiln/reduce.cuh", "kiln::pool2d", std::move(targs), std::move(dims), n);
}

Expected<GeneratedKernel> attention_kernel(const AttentionParams& p) {
  for (const StridedLayout* t : {&p.q, &p.k, &p.v})
    if (t->sizes.size() != 4 || t->strides.size() != 4) return unsupported("attention takes 4-D q, k and v");
  const DType dt = p.q.dtype;
  if (!is_float_type(dt) || dt == DType::Float64 || p.k.dtype != dt || p.v.dtype != dt)
    return unsupported("attention on the GPU takes float32, float16 or bfloat16 q, k and v of one dtype");
  const int64_t B = p.q.sizes[0], H = p.q.sizes[1], L = p.q.sizes[2], E = p.q.sizes[3];
  const int64_t Hk = p.k.sizes[1], S = p.k.sizes[2], Ev = p.v.sizes[3];
  if (p.k.sizes[0] != B || p.v.sizes[0] != B || p.k.sizes[3] != E || p.v.sizes[1] != Hk || p.v.sizes[2] != S ||
      Hk == 0 || H % Hk != 0)
    return invalid_argument("attention q, k and v shapes do not fit together");
  if (E > 256 || Ev > 256) return unsupported("attention head sizes above 256 are not supported on the GPU");
  if (E < 1 || Ev < 1) return unsupported("attention with an empty head");
  if (p.has_mask && (p.mask.sizes.size() != 4 || p.mask.strides.size() != 4))
    return invalid_argument("the attention mask must be expanded to 4-D");
  if (B * H > 65535) return unsupported("attention with more than 65535 batch x heads");
  // A warp per query row, 8 rows per block sharing key/value tiles of 32 keys
  // in shared memory (float32): keys, values and the rows' queries.
  constexpr int kRows = 8;
  const int64_t shared = 4 * (32 * (E + 1) + 32 * Ev + kRows * E);
  if (shared > 48 * 1024)
    return unsupported("attention a row at a time with head sizes " + std::to_string(E) + " and " + std::to_string(Ev) +
                       " needs " + std::to_string(shared) + " bytes of shared memory, more than 48 KiB");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dt));
  GeneratedKernel k;
  k.header = "kiln/attention.cuh";
  k.dims = {H, H / Hk, L, S};
  for (const StridedLayout* t : {&p.q, &p.k, &p.v}) k.dims.insert(k.dims.end(), t->strides.begin(), t->strides.end());
  k.dims.push_back(number_bits(p.scale, DType::Float32));
  const std::string causal = p.causal ? "true" : "false";
  if (p.has_mask) {
    KILN_ASSIGN_OR_RETURN(std::string M, device_type_name(p.mask.dtype));
    k.templ = "kiln::attention_rows_masked";
    k.targs = {T, M, causal, std::to_string(E), std::to_string(Ev)};
    k.dims.insert(k.dims.end(), p.mask.strides.begin(), p.mask.strides.end());
  } else {
    k.templ = "kiln::attention_rows";
    k.targs = {T, causal, std::to_string(E), std::to_string(Ev)};
  }
  k.grid = {static_cast<uint32_t>((L + kRows - 1) / kRows), static_cast<uint32_t>(B * H), 1};
  k.block = {kRows * 32, 1, 1};
  return k;
}

bool flash_attention_fits(const AttentionParams& p, const StridedLayout& out) {
  for (const StridedLayout* t : {&p.q, &p.k, &p.v, &out}) {
    if (t->sizes.size() != 4 || t->strides.size() != 4 || t->dtype != p.q.dtype) return false;
    if (t->strides[3] != 1 || t->strides[0] % 2 || t->strides[1] % 2 || t->strides[2] % 2) return false;
  }
  if (p.q.dtype != DType::Float16 && p.q.dtype != DType::BFloat16) return false;
  const int64_t B = p.q.sizes[0], H = p.q.sizes[1], L = p.q.sizes[2], E = p.q.sizes[3];
  const int64_t Hk = p.k.sizes[1], S = p.k.sizes[2];
  if (p.k.sizes[0] != B || p.v.sizes[0] != B || p.k.sizes[3] != E || p.v.sizes[1] != Hk || p.v.sizes[2] != S ||
      p.v.sizes[3] != E || out.sizes != p.q.sizes || Hk < 1 || H % Hk != 0)
    return false;
  if (E % 16 != 0 || E < 16 || E > 128) return false;
  if (p.has_mask && (p.mask.sizes.size() != 4 || p.mask.strides.size() != 4)) return false;
  return L >= 1 && L <= (int64_t{1} << 30) && S <= (int64_t{1} << 30) && H <= 65535 && B <= 65535;
}

Expected<GeneratedKernel> flash_attention_kernel(const AttentionParams& p, const StridedLayout& out, int sm_count) {
  if (!flash_attention_fits(p, out))
    return unsupported("tensor-core attention takes float16 or bfloat16 q, k, v and out of one dtype, head size a "
                       "multiple of 16 up to 128 for keys and values alike, unit last strides and even others");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(p.q.dtype));
  const int64_t B = p.q.sizes[0], H = p.q.sizes[1], L = p.q.sizes[2], E = p.q.sizes[3];
  const int64_t Hk = p.k.sizes[1], S = p.k.sizes[2];
  // Query rows per block of 4 warps: 64, unless that leaves multiprocessors
  // idle (fewer blocks than multiprocessors); then 16, each row group's keys
  // split between the 4 warps. (Measured on an H100 with BERT-base at length
  // 512, 96 blocks of 64 rows: 26.4 us a kernel, 25.3 split four ways, 32.3
  // split two ways, so a two-way split is not used.)
  const int64_t blocks64 = B * H * ((L + 63) / 64);
  const int row_warps = sm_count > 0 && blocks64 < static_cast<int64_t>(sm_count) ? 1 : 4;
  const int kRows = 16 * row_warps;
  const std::string rw = std::to_string(row_warps), splits = std::to_string(4 / row_warps);
  GeneratedKernel k;
  k.header = "kiln/attention.cuh";
  k.dims = {L, S, H / Hk};
  for (const StridedLayout* t : {&p.q, &p.k, &p.v, &out})
    k.dims.insert(k.dims.end(), t->strides.begin(), t->strides.begin() + 3);
  k.dims.push_back(number_bits(p.scale, DType::Float32));
  const std::string causal = p.causal ? "true" : "false";
  if (p.has_mask) {
    KILN_ASSIGN_OR_RETURN(std::string M, device_type_name(p.mask.dtype));
    k.templ = "kiln::flash_attention_masked";
    k.targs = {T, M, causal, std::to_string(E), rw, splits};
    k.dims.insert(k.dims.end(), p.mask.strides.begin(), p.mask.strides.end());
  } else {
    k.templ = "kiln::flash_attention";
    k.targs = {T, causal, std::to_string(E), rw, splits};
  }
  k.grid = {static_cast<uint32_t>((L + kRows - 1) / kRows), static_cast<uint32_t>(H), static_cast<uint32_t>(B)};
  k.block = {128, 1, 1};
  return k;
}

bool decode_attention_fits(const AttentionParams& p, const StridedLayout& out) {
  for (const StridedLayout* t : {&p.q, &p.k, &p.v, &out}) {
    if (t->sizes.size() != 4 || t->strides.size() != 4 || t->dtype != p.q.dtype || t->strides[3] != 1) return false;
  }
  const DType dt = p.q.dtype;
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16) return false;
  const int64_t B = p.q.sizes[0], H = p.q.sizes[1], L = p.q.sizes[2], E = p.q.sizes[3];
  const int64_t Hk = p.k.sizes[1], S = p.k.sizes[2], Ev = p.v.sizes[3];
  if (p.k.sizes[0] != B || p.v.sizes[0] != B || p.k.sizes[3] != E || p.v.sizes[1] != Hk || p.v.sizes[2] != S ||
      Hk < 1 || H % Hk != 0 || out.sizes != std::vector<int64_t>{B, H, L, Ev})
    return false;
  const int64_t most = dt == DType::Float32 ? 64 : 128;
  if (E < 1 || Ev < 1 || E > most || Ev > most) return false;
  if (p.has_mask && (p.mask.sizes.size() != 4 || p.mask.strides.size() != 4)) return false;
  const int64_t rows = (H / Hk) * L;
  return L >= 1 && L < 16 && rows <= 16 && S >= 1 && S <= (int64_t{1} << 30) && Hk <= 65535 && B <= 65535;
}

namespace {

// The chunks of 64 keys (decode_attention_body's kKeys) the decode attention splits S keys into.
int64_t decode_attention_chunks(int64_t S) { return (S + 63) / 64; }

}  // namespace

int64_t decode_attention_part_floats(const AttentionParams& p) {
  const int64_t B = p.q.sizes[0], H = p.q.sizes[1], L = p.q.sizes[2], Hk = p.k.sizes[1], S = p.k.sizes[2];
  return B * Hk * decode_attention_chunks(S) * (H / Hk) * L * (p.v.sizes[3] + 2);
}

Expected<std::array<GeneratedKernel, 2>> decode_attention_kernels(const AttentionParams& p, const StridedLayout& out) {
  if (!decode_attention_fits(p, out))
    return unsupported(
        "attention a chunk of keys at a time takes fewer than 16 query rows, at most 16 per key head, "
        "float32 (head sizes up to 64), float16 or bfloat16 (up to 128) with unit last strides");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(p.q.dtype));
  const int64_t B = p.q.sizes[0], H = p.q.sizes[1], L = p.q.sizes[2], E = p.q.sizes[3];
  const int64_t Hk = p.k.sizes[1], S = p.k.sizes[2], Ev = p.v.sizes[3], G = H / Hk, R = G * L;
  const int64_t chunks = decode_attention_chunks(S);
  const int64_t most = R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : R <= 8 ? 8 : 16;
  std::array<GeneratedKernel, 2> ks;
  GeneratedKernel& k = ks[0];
  k.header = "kiln/attention.cuh";
  k.dims = {L, S, G, R, chunks};
  for (const StridedLayout* t : {&p.q, &p.k, &p.v})
    k.dims.insert(k.dims.end(), t->strides.begin(), t->strides.begin() + 3);
  k.dims.push_back(number_bits(p.scale, DType::Float32));
  const std::string causal = p.causal ? "true" : "false";
  if (p.has_mask) {
    KILN_ASSIGN_OR_RETURN(std::string M, device_type_name(p.mask.dtype));
    k.templ = "kiln::decode_attention_masked";
    k.targs = {T, M, causal, std::to_string(E), std::to_string(Ev), std::to_string(most)};
    k.dims.insert(k.dims.end(), p.mask.strides.begin(), p.mask.strides.end());
  } else {
    k.templ = "kiln::decode_attention";
    k.targs = {T, causal, std::to_string(E), std::to_string(Ev), std::to_string(most)};
  }
  k.grid = {static_cast<uint32_t>(chunks), static_cast<uint32_t>(Hk), static_cast<uint32_t>(B)};
  k.block = {128, 1, 1};
  GeneratedKernel& m = ks[1];
  m.header = "kiln/attention.cuh";
  m.templ = "kiln::decode_attention_merge";
  m.targs = {T, std::to_string(Ev)};
  const int64_t rows = B * Hk * R;
  m.dims = {rows, Hk, R, L, G, chunks};
  m.dims.insert(m.dims.end(), out.strides.begin(), out.strides.end());
  m.grid = {static_cast<uint32_t>((rows + 3) / 4), 1, 1};
  m.block = {128, 1, 1};
  return ks;
}

Expected<GeneratedKernel> gather_rows_kernel(DType dtype, DType index_dtype, int64_t rows, int64_t table_rows,
                                             int64_t cols, int error_code) {
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  if (index_dtype != DType::Int64 && index_dtype != DType::Int32)
    return unsupported("row gathers take int64 or int32 indices");
  KILN_ASSIGN_OR_RETURN(std::string I, device_type_name(index_dtype));
  const int64_t n = rows * cols;
  return template_1d("kiln/index.cuh", "kiln::gather_rows", {T, I, std::to_string(error_code)}, {cols, table_rows, n},
                     n);
}

Expected<GeneratedKernel> search_sorted_kernel(DType out, DType dtype, int64_t len, int64_t per_row, int64_t n,
                                               bool right, bool sorter, int error_code) {
  if (out != DType::Int64 && out != DType::Int32) return unsupported("insertion points other than int64 or int32");
  if (dtype == DType::Bool) return unsupported("insertion points in a bool sequence");
  KILN_ASSIGN_OR_RETURN(std::string O, device_type_name(out));
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  return template_1d("kiln/index.cuh", sorter ? "kiln::search_sorted_by" : "kiln::search_sorted",
                     {O, T, right ? "true" : "false", std::to_string(error_code)}, {len, per_row, n}, n);
}

Expected<GeneratedKernel> isin_kernel(DType elements, DType tests, int64_t n, int64_t n_test, bool invert) {
  if ((elements == DType::Int64) != (tests == DType::Int64)) return unsupported("isin of int64 with another dtype");
  KILN_ASSIGN_OR_RETURN(std::string TE, device_type_name(elements));
  KILN_ASSIGN_OR_RETURN(std::string TT, device_type_name(tests));
  return template_1d("kiln/index.cuh", "kiln::isin", {TE, TT, invert ? "true" : "false"}, {n_test, n}, n);
}

Expected<GeneratedKernel> histogram_range_kernel(DType dtype, double lo, double hi, int64_t n) {
  if (!is_float_type(dtype)) return unsupported("histc of a non-floating tensor");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  int64_t lo_bits = 0, hi_bits = 0;
  std::memcpy(&lo_bits, &lo, sizeof lo);
  std::memcpy(&hi_bits, &hi, sizeof hi);
  GeneratedKernel k = template_1d("kiln/index.cuh", "kiln::histogram_range", {T}, {lo_bits, hi_bits, n}, n);
  k.grid = {1, 1, 1};
  return k;
}

Expected<GeneratedKernel> histogram_kernel(DType dtype, int64_t bins, int64_t n, bool single) {
  if (!is_float_type(dtype)) return unsupported("histc of a non-floating tensor");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  return template_1d("kiln/index.cuh", "kiln::histogram_counts", {T, single ? "float" : "double"}, {bins, n}, n);
}

Expected<GeneratedKernel> index_select_kernel(DType dtype, DType index_dtype, int64_t outer, int64_t table_rows,
                                              int64_t count, int64_t cols, int error_code) {
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  if (index_dtype != DType::Int64 && index_dtype != DType::Int32)
    return unsupported("index_select takes int64 or int32 indices");
  KILN_ASSIGN_OR_RETURN(std::string I, device_type_name(index_dtype));
  const int64_t n = outer * count * cols;
  return template_1d("kiln/index.cuh", "kiln::index_select", {T, I, std::to_string(error_code)},
                     {cols, table_rows, count, n}, n);
}

Expected<GeneratedKernel> index_copy_kernel(DType dtype, DType index_dtype, int64_t outer, int64_t count, int64_t inner,
                                            int64_t out_dim, int error_code) {
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  if (index_dtype != DType::Int64 && index_dtype != DType::Int32)
    return unsupported("index_copy takes int64 or int32 indices");
  KILN_ASSIGN_OR_RETURN(std::string I, device_type_name(index_dtype));
  const int64_t n = outer * count * inner;
  return template_1d("kiln/index.cuh", "kiln::index_copy", {T, I, std::to_string(error_code)},
                     {inner, count, out_dim, n}, n);
}

Expected<GeneratedKernel> attention_softmax_kernel(DType dtype, int64_t B, int64_t H, int64_t L, int64_t S,
                                                   const StridedLayout* mask, bool causal) {
  if (dtype != DType::Float32 && dtype != DType::Float16 && dtype != DType::BFloat16)
    return unsupported("attention softmax takes float32, float16 or bfloat16 scores");
  if (mask && (mask->sizes.size() != 4 || mask->strides.size() != 4))
    return invalid_argument("the attention mask must be expanded to 4-D");
  const int64_t rows = B * H * L;
  if (rows > 2147483647LL) return unsupported("too many attention rows for one launch");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  const uint32_t threads = S <= 256 ? 64 : (S <= 1024 ? 128 : 256);
  GeneratedKernel k;
  k.header = "kiln/attention_softmax.cuh";
  k.dims = {H, L, S};
  const std::string c = causal ? "true" : "false";
  if (mask) {
    KILN_ASSIGN_OR_RETURN(std::string M, device_type_name(mask->dtype));
    k.templ = "kiln::attention_softmax_masked";
    k.targs = {T, M, c, std::to_string(threads)};
    k.dims.insert(k.dims.end(), mask->strides.begin(), mask->strides.end());
  } else {
    k.templ = "kiln::attention_softmax";
    k.targs = {T, c, std::to_string(threads)};
  }
  k.grid = {static_cast<uint32_t>(std::max<int64_t>(rows, 1)), 1, 1};
  k.block = {threads, 1, 1};
  return k;
}

Expected<GeneratedKernel> pad_channels_kernel(const StridedLayout& in, int64_t padded_channels) {
  KILN_TRY(check_layout(in, "input"));
  if (in.sizes.size() != 4) return unsupported("channel padding takes a 4-D [N, C, H, W] input");
  if (padded_channels < in.sizes[1]) return invalid_argument("channel padding cannot drop channels");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(in.dtype));
  const int64_t C = in.sizes[1], H = in.sizes[2], W = in.sizes[3], P = padded_channels;
  const int64_t n = in.sizes[0] * H * W * P;
  std::vector<int64_t> dims{P, W, H, C, n};
  dims.insert(dims.end(), in.strides.begin(), in.strides.end());
  return template_1d("kiln/im2col.cuh", "kiln::pad_channels", {T}, std::move(dims), n);
}

Expected<GeneratedKernel> im2col_kernel(const Im2colParams& p, const StridedLayout& in) {
  KILN_TRY(check_layout(in, "input"));
  if (in.sizes.size() != 4) return unsupported("im2col takes a 4-D [N, C, H, W] input");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(in.dtype));
  const int64_t N = in.sizes[0], C = in.sizes[1], H = in.sizes[2], W = in.sizes[3];
  const int64_t cols = p.r * p.s * C;
  const int64_t n = N * p.oh * p.ow * cols;
  std::vector<int64_t> dims{cols, C, p.ow, p.oh, H, W, n};
  dims.insert(dims.end(), in.strides.begin(), in.strides.end());
  std::vector<std::string> targs{T};
  for (int64_t v : {p.s, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw}) targs.push_back(std::to_string(v));
  return template_1d("kiln/im2col.cuh", "kiln::im2col", std::move(targs), std::move(dims), n);
}

Expected<GeneratedKernel> gather_kernel(const StridedLayout& out, const StridedLayout& in, const StridedLayout& index,
                                        int64_t dim, int error_code) {
  KILN_TRY(check_layout(out, "output"));
  KILN_TRY(check_layout(in, "input"));
  KILN_TRY(check_layout(index, "index"));
  const size_t rank = index.sizes.size();
  if (out.sizes != index.sizes || in.sizes.size() != rank || dim < 0 || static_cast<size_t>(dim) >= rank)
    return invalid_argument("gather: output, input and index ranks or sizes do not fit");
  if (index.dtype != DType::Int64 && index.dtype != DType::Int32)
    return unsupported("gather takes int64 or int32 indices");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(in.dtype));
  KILN_ASSIGN_OR_RETURN(std::string I, device_type_name(index.dtype));
  const int64_t n = out.numel();
  std::vector<int64_t> dims{in.sizes[static_cast<size_t>(dim)], n};
  for (const std::vector<int64_t>* v : {&index.sizes, &out.strides, &index.strides, &in.strides})
    dims.insert(dims.end(), v->begin(), v->end());
  return template_1d("kiln/index.cuh", "kiln::gather",
                     {T, I, std::to_string(rank), std::to_string(dim), std::to_string(error_code)}, std::move(dims), n);
}

Expected<GeneratedKernel> index_kernel(const StridedLayout& out, const StridedLayout& in,
                                       const std::vector<StridedLayout>& indices, int64_t first, int64_t index_rank,
                                       int error_code, IndexAccess access) {
  KILN_TRY(check_layout(out, "output"));
  KILN_TRY(check_layout(in, "input"));
  const int64_t count = static_cast<int64_t>(indices.size());
  const int64_t rank = static_cast<int64_t>(out.sizes.size());
  if (count < 1 || first < 0 || index_rank < 0 || first + count > static_cast<int64_t>(in.sizes.size()) ||
      rank != static_cast<int64_t>(in.sizes.size()) - count + index_rank || out.dtype != in.dtype)
    return invalid_argument("index: output, input and index ranks do not fit");
  if (count > 4) return unsupported("index with more than 4 index tensors");
  if (access == IndexAccess::kAccumulate &&
      !(is_float_type(in.dtype) || in.dtype == DType::Int64 || in.dtype == DType::Int32))
    return unsupported("index_put accumulating into " + std::string(dtype_name(in.dtype)) +
                       " (atomic adds take floats, int64 and int32)");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(in.dtype));
  std::vector<std::string> targs{T};
  for (const StridedLayout& l : indices) {
    KILN_TRY(check_layout(l, "index"));
    if (l.sizes != out.sizes) return invalid_argument("index: each index is given at the output's sizes");
    if (l.dtype != DType::Int64 && l.dtype != DType::Int32) return unsupported("index takes int64 or int32 indices");
    KILN_ASSIGN_OR_RETURN(std::string I, device_type_name(l.dtype));
    targs.push_back(I);
  }
  for (int64_t v : {rank, first, index_rank, static_cast<int64_t>(error_code), static_cast<int64_t>(access)})
    targs.push_back(std::to_string(v));
  const int64_t n = out.numel();
  std::vector<int64_t> dims{n};
  dims.insert(dims.end(), out.sizes.begin(), out.sizes.end());
  dims.insert(dims.end(), out.strides.begin(), out.strides.end());
  for (const StridedLayout& l : indices) dims.insert(dims.end(), l.strides.begin(), l.strides.end());
  dims.insert(dims.end(), in.strides.begin(), in.strides.end());
  for (int64_t m = 0; m < count; ++m) dims.push_back(in.sizes[static_cast<size_t>(first + m)]);
  return template_1d("kiln/index.cuh", "kiln::index" + std::to_string(count), std::move(targs), std::move(dims), n);
}

Expected<GeneratedKernel> col2im_kernel(const Col2imParams& p) {
  if (p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1 || p.r < 1 || p.s < 1)
    return invalid_argument("col2im: strides, dilations and the filter must be positive");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(p.dtype));
  const int64_t n = p.n * p.k * p.oh * p.ow;
  return template_1d("kiln/im2col.cuh", "kiln::col2im", {T, p.has_bias ? "true" : "false"},
                     {n, p.k, p.oh, p.ow, p.h, p.w, p.r, p.s, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw}, n);
}

Expected<GeneratedKernel> pad_edges_kernel(const StridedLayout& out, const StridedLayout& in,
                                           const std::vector<int64_t>& before, int mode) {
  KILN_TRY(check_layout(out, "output"));
  KILN_TRY(check_layout(in, "input"));
  const size_t rank = out.sizes.size();
  if (rank == 0 || in.sizes.size() != rank || before.size() != rank || out.dtype != in.dtype || mode < 0 || mode > 2 ||
      !out.is_contiguous())
    return invalid_argument("pad: output, input and pads do not fit");
  for (int64_t s : in.sizes)
    if (s < 1) return invalid_argument("pad: a reflected, replicated or circular pad of an empty dim");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(out.dtype));
  const int64_t n = out.numel();
  std::vector<int64_t> dims{n};
  for (const std::vector<int64_t>* v : {&out.sizes, &in.sizes, &in.strides, &before})
    dims.insert(dims.end(), v->begin(), v->end());
  return template_1d("kiln/index.cuh", "kiln::pad_edges", {T, std::to_string(rank), std::to_string(mode)},
                     std::move(dims), n);
}

Expected<GeneratedKernel> scatter_kernel(const ScatterShape& s, ScatterOp op, int phase, int error_code) {
  const size_t rank = s.space.size();
  if (rank == 0 || s.index_strides.size() != rank || s.src_strides.size() != rank || s.dst_strides.size() != rank ||
      s.dim < 0 || s.dim >= static_cast<int64_t>(rank) || phase < 0 || phase > 2)
    return invalid_argument("scatter: the space, strides and dim do not fit");
  if (s.index_dtype != DType::Int64 && s.index_dtype != DType::Int32)
    return unsupported("scatter takes int64 or int32 indices");
  const bool takes = s.dtype == DType::Bool
                         ? op == ScatterOp::kPut
                         : s.dtype == DType::Float32 || s.dtype == DType::Float16 || s.dtype == DType::BFloat16 ||
                               s.dtype == DType::Int64 || s.dtype == DType::Int32;
  if (!takes)
    return unsupported("scatter into " + std::string(dtype_name(s.dtype)) +
                       " (float32, the 16-bit floats, int64 and int32; bool only written)");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(s.dtype));
  KILN_ASSIGN_OR_RETURN(std::string I, device_type_name(s.index_dtype));
  const int64_t n =
      phase == 2 ? s.dst_numel : std::accumulate(s.space.begin(), s.space.end(), int64_t{1}, std::multiplies<>());
  std::vector<int64_t> dims{n, s.extent, std::bit_cast<int64_t>(s.alpha)};
  for (const std::vector<int64_t>* v : {&s.space, &s.index_strides, &s.src_strides, &s.dst_strides})
    dims.insert(dims.end(), v->begin(), v->end());
  return template_1d("kiln/index.cuh", "kiln::scatter",
                     {T, I, std::to_string(rank), std::to_string(s.dim), std::to_string(error_code),
                      std::to_string(static_cast<int>(op)), std::to_string(phase)},
                     std::move(dims), n);
}

Expected<GeneratedKernel> arange_kernel(DType dtype, int64_t n, int64_t start, int64_t step) {
  if (dtype != DType::Int64 && dtype != DType::Int32) return unsupported("arange on the GPU gives int64 or int32");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(dtype));
  return template_1d("kiln/fill.cuh", "kiln::arange", {T}, {start, step, n}, n);
}

Expected<GeneratedKernel> scalar_fill_kernel(int64_t value) {
  GeneratedKernel k;
  k.header = "kiln/fill.cuh";
  k.templ = "kiln::scalar_fill";
  k.dims = {value};
  k.block = {32, 1, 1};
  return k;
}

bool gemv_fits(const GemvShape& s) {
  if (s.dtype != DType::Float32 && s.dtype != DType::Float16 && s.dtype != DType::BFloat16) return false;
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(s.dtype));
  const int64_t wvec = s.fp8_weights ? 16 : vec;  // weights per 16-byte vector of w
  if (s.m < 1 || s.m > kGemvMaxRows || s.n < 1 || s.k < wvec) return false;
  if (s.k % wvec != 0 || s.lda % vec != 0 || s.ldw % wvec != 0 || s.lda < s.k || s.ldw < s.k || s.ldc < s.n)
    return false;
  const bool swiglu = s.activation == "swiglu";
  if (s.activation != "none" && s.activation != "relu" && s.activation != "gelu" && !swiglu) return false;
  if (swiglu && (s.gate_row < 0 || s.up_row < 0)) return false;
  if (!std::isfinite(s.alpha)) return false;
  return s.n <= (int64_t{1} << 31) / 8 && s.k <= (int64_t{1} << 30);
}

Expected<GeneratedKernel> gemv_kernel(const GemvShape& s) {
  if (!gemv_fits(s)) return invalid_argument("gemv_kernel: shape or dtype it does not take");
  KILN_ASSIGN_OR_RETURN(std::string T, device_type_name(s.dtype));
  constexpr int kWarps = 8;
  const int64_t vec = s.fp8_weights ? 16 : 16 / static_cast<int64_t>(dtype_size(s.dtype));
  const int64_t kv = s.k / vec;  // 16-byte vectors per row of w
  // Split k among the warps of a block until there are blocks enough to fill
  // the device (about two per SM of a large GPU), keeping 32 vectors per warp.
  // A SwiGLU column reads two rows of w and splits as the product of both
  // halves would (the same sums in the same order as the unfused layers).
  const bool swiglu = s.activation == "swiglu";
  const int64_t rows_of_w = swiglu ? 2 * s.n : s.n;
  int split = 1;
  while (split < kWarps && (rows_of_w * split + kWarps - 1) / kWarps < 264 && kv >= 64 * split) split *= 2;
  const int cols = kWarps / split;
  const int act = s.activation == "relu" ? 1 : s.activation == "gelu" ? 2 : swiglu ? 3 : 0;
  GeneratedKernel g;
  g.header = "kiln/gemv.cuh";
  g.templ = std::string(s.fp8_weights ? "kiln::gemv_fp8" : "kiln::gemv") + (s.has_bias ? "_bias" : "");
  // Row counts share instances by the power of two at or above them (the count itself a size).
  const int64_t most = s.m <= 1 ? 1 : s.m <= 2 ? 2 : s.m <= 4 ? 4 : 8;
  g.targs = {T, std::to_string(most), std::to_string(split), std::to_string(act)};
  g.dims = {s.n, s.ldw, kv, s.lda, s.ldc, static_cast<int64_t>(std::bit_cast<uint32_t>(s.alpha)), s.m};
  if (swiglu) {
    g.dims.push_back(s.gate_row);
    g.dims.push_back(s.up_row);
  }
  g.grid = {static_cast<uint32_t>((s.n + cols - 1) / cols), 1, 1};
  g.block = {kWarps * 32, 1, 1};
  return g;
}

}  // namespace kiln::cuda
