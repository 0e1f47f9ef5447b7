// kiln._C: the C++ library as a Python extension (nanobind). Tensors cross
// by DLPack in both directions without copies: an input or a bound buffer is
// a view of the caller's memory, kept alive while kiln holds it; an output
// hands kiln's storage to the caller, who keeps it alive as long as it likes.
// Errors arrive as kiln.KilnError carrying the C++ message, code and fault.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "environment/environment.h"
#include "kiln/cache.h"
#include "kiln/kiln.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using AnyArray = nb::ndarray<>;

// The Python exception type, created at module import.
PyObject* g_kiln_error = nullptr;

const char* code_name(kiln::ErrorCode c) {
  switch (c) {
    case kiln::ErrorCode::kOk: return "ok";
    case kiln::ErrorCode::kInvalidArgument: return "invalid_argument";
    case kiln::ErrorCode::kFormat: return "format";
    case kiln::ErrorCode::kUnsupported: return "unsupported";
    case kiln::ErrorCode::kNotFound: return "not_found";
    case kiln::ErrorCode::kIo: return "io";
    case kiln::ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

// Carries a failed Status out of a binding; translated into kiln.KilnError.
struct StatusError {
  kiln::Status status;
};

[[noreturn]] void raise(kiln::Status s) { throw StatusError{std::move(s)}; }

template <typename T>
T take(kiln::Expected<T>&& e) {
  if (!e) raise(e.status());
  return std::move(*e);
}

void check(const kiln::Status& s) {
  if (!s) raise(s);
}

// The message the CLI prints after "kiln: error: " (a file's fault named first).
std::string message_of(const kiln::Status& s) {
  if (s.code() == kiln::ErrorCode::kFormat && s.fault() != kiln::FileFault::kMalformed)
    return std::string(kiln::file_fault_name(s.fault())) + ": " + s.message();
  return s.message();
}

// kiln dtypes and their DLPack codes (the one table both directions read).
struct DlpackDtype {
  kiln::DType dtype;
  nb::dlpack::dtype_code code;
  uint8_t bits;
};
constexpr DlpackDtype kDlpackDtypes[] = {
    {kiln::DType::Float32, nb::dlpack::dtype_code::Float, 32},
    {kiln::DType::Float64, nb::dlpack::dtype_code::Float, 64},
    {kiln::DType::Float16, nb::dlpack::dtype_code::Float, 16},
    {kiln::DType::BFloat16, nb::dlpack::dtype_code::Bfloat, 16},
    {kiln::DType::Int64, nb::dlpack::dtype_code::Int, 64},
    {kiln::DType::Int32, nb::dlpack::dtype_code::Int, 32},
    {kiln::DType::Int16, nb::dlpack::dtype_code::Int, 16},
    {kiln::DType::Int8, nb::dlpack::dtype_code::Int, 8},
    {kiln::DType::UInt8, nb::dlpack::dtype_code::UInt, 8},
    {kiln::DType::Bool, nb::dlpack::dtype_code::Bool, 8},
};

std::optional<kiln::DType> dtype_from_dlpack(nb::dlpack::dtype t) {
  for (const DlpackDtype& d : kDlpackDtypes)
    if (t.lanes == 1 && t.code == static_cast<uint8_t>(d.code) && t.bits == d.bits) return d.dtype;
  return std::nullopt;
}

nb::dlpack::dtype dlpack_of(kiln::DType dtype) {
  for (const DlpackDtype& d : kDlpackDtypes)
    if (d.dtype == dtype) return nb::dlpack::dtype{static_cast<uint8_t>(d.code), d.bits, 1};
  return nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 32, 1};  // every DType is listed
}

// A kiln view of the caller's memory (no copy). `what` names the tensor in errors.
kiln::Tensor tensor_of(const AnyArray& a, const std::string& what) {
  if (a.device_type() != nb::device::cpu::value)
    raise(kiln::invalid_argument(what + " is on a device (DLPack device type " + std::to_string(a.device_type()) +
                                 "); kiln sessions take host (CPU) tensors"));
  auto dtype = dtype_from_dlpack(a.dtype());
  if (!dtype)
    raise(kiln::invalid_argument(what + ": DLPack dtype (code " + std::to_string(a.dtype().code) + ", " +
                                 std::to_string(a.dtype().bits) + " bits) has no kiln dtype"));
  kiln::Shape sizes(a.ndim()), strides(a.ndim());
  int64_t last = 0;  // offset of the last element, in elements
  bool empty = false;
  for (size_t d = 0; d < a.ndim(); ++d) {
    sizes[d] = static_cast<int64_t>(a.shape(d));
    strides[d] = a.stride(d);
    if (strides[d] < 0) raise(kiln::invalid_argument(what + ": negative strides are not supported"));
    if (sizes[d] == 0)
      empty = true;
    else
      last += (sizes[d] - 1) * strides[d];
  }
  size_t nbytes = empty ? 0 : static_cast<size_t>(last + 1) * kiln::dtype_size(*dtype);
  // The keeper holds the DLPack producer's tensor alive (nanobind takes the GIL to release it).
  auto keeper = std::make_shared<AnyArray>(a);
  auto storage = kiln::Storage::borrow(static_cast<uint8_t*>(a.data()), nbytes, keeper);
  return take(kiln::Tensor::from_storage(storage, *dtype, sizes, strides, 0));
}

// A kiln tensor over the caller's contiguous CUDA memory (no copy; never read
// on the host).
kiln::Tensor device_tensor_of(const AnyArray& a, const std::string& what) {
  if (a.device_type() != nb::device::cuda::value)
    raise(kiln::invalid_argument(what + " is not CUDA memory (DLPack device type " + std::to_string(a.device_type()) +
                                 ")"));
  auto dtype = dtype_from_dlpack(a.dtype());
  if (!dtype) raise(kiln::invalid_argument(what + ": its DLPack dtype has no kiln dtype"));
  kiln::Shape sizes(a.ndim());
  int64_t numel = 1, expect = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    sizes[d] = static_cast<int64_t>(a.shape(d));
    if (sizes[d] != 1 && a.stride(d) != expect)
      raise(kiln::invalid_argument(what + " must be contiguous (call .contiguous() first)"));
    expect *= sizes[d];
    numel *= sizes[d];
  }
  auto keeper = std::make_shared<AnyArray>(a);
  auto storage =
      kiln::Storage::borrow(static_cast<uint8_t*>(a.data()), static_cast<size_t>(numel) * kiln::dtype_size(*dtype),
                            keeper, kiln::Device::cuda(a.device_id()));
  return take(kiln::Tensor::from_storage(storage, *dtype, sizes, kiln::contiguous_strides(sizes), 0));
}

// A kiln view of the caller's memory, host or CUDA (no copy).
kiln::Tensor any_tensor_of(const AnyArray& a, const std::string& what) {
  return a.device_type() == nb::device::cuda::value ? device_tensor_of(a, what) : tensor_of(a, what);
}

// The caller's view of a kiln tensor (no copy): an object with __dlpack__ that
// keeps kiln's storage alive; CUDA memory stays CUDA memory.
nb::object array_of(const kiln::Tensor& t) {
  auto* held = new kiln::Tensor(t);
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<kiln::Tensor*>(p); });
  std::vector<size_t> shape(t.sizes().begin(), t.sizes().end());
  const bool cuda = t.device().type == kiln::DeviceType::kCUDA;
  nb::ndarray<nb::array_api> a(t.raw_data(), shape.size(), shape.data(), owner, t.strides().data(),
                               dlpack_of(t.dtype()), cuda ? nb::device::cuda::value : nb::device::cpu::value,
                               cuda ? t.device().index : 0);
  return nb::cast(a, nb::rv_policy::reference);
}

// A stream from Python: None is kiln's default stream, 0 CUDA's legacy
// default stream (PyTorch's default), anything else a cudaStream_t.
void* stream_of(const std::optional<uintptr_t>& stream) {
  if (!stream) return nullptr;
  return reinterpret_cast<void*>(*stream == 0 ? uintptr_t{1} : *stream);  // 1: cudaStreamLegacy
}

nb::dict spec_dict(const kiln::TensorSpec& s) {
  nb::dict d;
  d["name"] = s.name;
  d["dtype"] = std::string(kiln::dtype_name(s.dtype));
  d["dims"] = s.dims;
  d["kind"] = s.kind;
  return d;
}

nb::list spec_list(const std::vector<kiln::TensorSpec>& specs) {
  nb::list l;
  for (const auto& s : specs) l.append(spec_dict(s));
  return l;
}

using ProgramPtr = std::shared_ptr<const kiln::Program>;

// A program and the method a view of it answers for (methods are owned by the program).
struct ProgramHandle {
  ProgramPtr program;
  const kiln::Program& method(const std::optional<std::string>& name) const {
    if (!name) return *program;
    const kiln::Program* m = program->method(*name);
    if (!m) raise(kiln::not_found("the program has no method '" + *name + "'"));
    return *m;
  }
};

kiln::LoadOptions load_options(
    const std::string& device, const std::string& precision, const std::string& cache_dir, int min_block_size,
    const std::vector<std::string>& fallback_ops,
    const std::vector<std::tuple<std::string, kiln::Shape, kiln::Shape, kiln::Shape>>& shapes,
    bool require_full_compilation, const std::string& batch_buckets, bool allow_fallback,
    const std::vector<std::string>& disabled_passes) {
  kiln::LoadOptions o;
  o.compile.disabled_passes = disabled_passes;
  o.compile.allow_fallback = allow_fallback;
  kiln::Expected<kiln::BatchBuckets> b = kiln::parse_batch_buckets(batch_buckets);
  if (!b) raise(b.status());
  o.compile.batch_buckets = *b;
  o.compile.device = device;
  kiln::Expected<kiln::Precision> p = kiln::parse_precision(precision);
  if (!p) raise(p.status());
  o.compile.precision = *p;
  o.compile.cache_dir = cache_dir;
  o.compile.min_block_size = min_block_size;
  o.compile.fallback_ops = fallback_ops;
  o.compile.require_full_compilation = require_full_compilation;
  for (const auto& [name, mn, opt, mx] : shapes) o.compile.shapes.push_back({name, mn, opt, mx});
  return o;
}

class SessionHandle {
 public:
  explicit SessionHandle(const ProgramHandle& p) : program_(p.program), session_(p.program) {}

  nb::object run(const std::vector<AnyArray>& inputs, const std::optional<std::string>& method,
                 const std::optional<uintptr_t>& stream, const std::optional<std::vector<AnyArray>>& outputs) {
    std::vector<kiln::Tensor> ts;
    ts.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) ts.push_back(any_tensor_of(inputs[i], "input " + std::to_string(i)));
    kiln::RunOptions options;
    options.stream = stream_of(stream);
    if (outputs)
      for (size_t o = 0; o < outputs->size(); ++o)
        options.outputs.push_back(any_tensor_of((*outputs)[o], "output " + std::to_string(o)));
    kiln::Expected<std::vector<kiln::Tensor>> out = [&] {
      nb::gil_scoped_release release;
      return method ? session_.run(*method, ts, options) : session_.run(ts, options);
    }();
    ts.clear();
    options.outputs.clear();
    std::vector<kiln::Tensor> results = take(std::move(out));
    if (outputs) return nb::none();  // written into the caller's memory
    nb::list result;
    for (const auto& t : results) result.append(array_of(t));
    return result;
  }

  // Per user output, (dtype name, sizes) of a call with `inputs` (CUDA or
  // host memory; only their types are read).
  nb::list output_types(const std::vector<AnyArray>& inputs) const {
    std::vector<kiln::Tensor> ts;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string what = "input " + std::to_string(i);
      ts.push_back(inputs[i].device_type() == nb::device::cuda::value ? device_tensor_of(inputs[i], what)
                                                                      : tensor_of(inputs[i], what));
    }
    nb::list result;
    for (const kiln::OutputType& t : take(session_.output_types(ts)))
      result.append(nb::make_tuple(std::string(kiln::dtype_name(t.dtype)), t.sizes));
    return result;
  }

  // Where the session keeps it (CUDA memory for a CUDA program's state).
  nb::object buffer(const std::string& fqn) const { return array_of(take(session_.buffer(fqn))); }
  void set_buffer(const std::string& fqn, const AnyArray& value) {
    check(session_.set_buffer(fqn, any_tensor_of(value, "buffer '" + fqn + "'")));
  }
  void bind_buffer(const std::string& fqn, const AnyArray& memory) {
    check(session_.bind_buffer(fqn, any_tensor_of(memory, "buffer '" + fqn + "'")));
  }
  void reset() { check(session_.reset()); }
  void synchronize() {
    kiln::Status st;
    {
      nb::gil_scoped_release release;
      st = session_.synchronize();
    }
    check(st);
  }
  ProgramHandle program() const { return {program_}; }

 private:
  ProgramPtr program_;
  kiln::Session session_;
};

}  // namespace

NB_MODULE(_C, m) {
  kiln::set_settings(kiln::settings_from_environment());
  m.doc() = "kiln's C++ compiler and runtime";
  m.attr("__version__") = KILN_VERSION_STRING;

  g_kiln_error = PyErr_NewExceptionWithDoc("kiln.KilnError",
                                           "An error from kiln's C++ library: the message the CLI prints, with "
                                           "`code` (e.g. 'invalid_argument', 'format') and, for a broken file, "
                                           "`fault` (e.g. 'truncated').",
                                           PyExc_RuntimeError, nullptr);
  m.attr("KilnError") = nb::handle(g_kiln_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::object exc = nb::handle(g_kiln_error)(message_of(e.status));
      exc.attr("code") = code_name(e.status.code());
      exc.attr("fault") = e.status.fault() == kiln::FileFault::kNone
                              ? nb::object(nb::none())
                              : nb::object(nb::str(kiln::file_fault_name(e.status.fault())));
      PyErr_SetObject(g_kiln_error, exc.ptr());
    }
  });

  m.def(
      "default_cache_dir",
      [] {
        kiln::set_settings(kiln::settings_from_environment());
        return kiln::default_cache_dir();
      },
      "The engine cache directory the CLI uses by default ($KILN_CACHE_DIR, else under the user's cache directory).");
  m.def(
      "known_op", [](std::string_view target) { return kiln::is_known_op(target); }, "target"_a,
      "Whether kiln's IR knows an op target such as 'aten.relu.default' (a .pt2 with an unknown op is refused).");

  nb::class_<ProgramHandle>(m, "Program", "A loaded, compiled program (immutable; shared by sessions).")
      .def_static(
          "load",
          [](const std::string& path, const std::string& device, const std::string& precision,
             const std::string& cache_dir, int min_block_size, const std::vector<std::string>& fallback_ops,
             const std::vector<std::tuple<std::string, kiln::Shape, kiln::Shape, kiln::Shape>>& shapes,
             bool require_full_compilation, const std::string& batch_buckets, bool allow_fallback,
             const std::vector<std::string>& disabled_passes) {
            kiln::LoadOptions o =
                load_options(device, precision, cache_dir, min_block_size, fallback_ops, shapes,
                             require_full_compilation, batch_buckets, allow_fallback, disabled_passes);
            // The environment as it is now (os.environ may have changed since import).
            kiln::set_settings(kiln::settings_from_environment());
            nb::gil_scoped_release release;
            return ProgramHandle{take(kiln::compile(path, o))};
          },
          "path"_a, "device"_a = "cpu", "precision"_a = "fp32", "cache_dir"_a = "", "min_block_size"_a = 5,
          "fallback_ops"_a = std::vector<std::string>{},
          "shapes"_a = std::vector<std::tuple<std::string, kiln::Shape, kiln::Shape, kiln::Shape>>{},
          "require_full_compilation"_a = false, "batch_buckets"_a = "auto", "allow_fallback"_a = false,
          "disabled_passes"_a = std::vector<std::string>{},
          "Loads a .pt2 (compiling it with these options) or a compiled .kiln file.")
      .def(
          "save",
          [](const ProgramHandle& p, const std::string& path) {
            nb::gil_scoped_release release;
            check(p.program->save(path));
          },
          "path"_a, "Writes the compiled program as a .kiln file (atomically).")
      .def_prop_ro("method_names", [](const ProgramHandle& p) { return p.program->method_names(); })
      .def(
          "inputs",
          [](const ProgramHandle& p, std::optional<std::string> m) { return spec_list(p.method(m).inputs()); },
          "method"_a = nb::none())
      .def(
          "outputs",
          [](const ProgramHandle& p, std::optional<std::string> m) { return spec_list(p.method(m).outputs()); },
          "method"_a = nb::none())
      .def(
          "buffers",
          [](const ProgramHandle& p, std::optional<std::string> m) { return spec_list(p.method(m).buffers()); },
          "method"_a = nb::none())
      .def(
          "mutated_inputs",
          [](const ProgramHandle& p, std::optional<std::string> m) { return p.method(m).mutated_inputs(); },
          "method"_a = nb::none())
      .def(
          "mutated_buffers",
          [](const ProgramHandle& p, std::optional<std::string> m) { return p.method(m).mutated_buffers(); },
          "method"_a = nb::none())
      .def("buffer_updated_in_place",
           [](const ProgramHandle& p, const std::string& fqn) { return p.program->buffer_updated_in_place(fqn); })
      .def(
          "aliases",
          [](const ProgramHandle& p) {
            nb::dict d;
            for (const auto& [alias, kept] : p.program->aliases()) d[nb::str(alias.c_str())] = nb::str(kept.c_str());
            return d;
          },
          "Other names of one tensor (one storage in the archive): each alias -> the name the program keeps.")
      .def(
          "symbols",
          [](const ProgramHandle& p, std::optional<std::string> m) {
            nb::list l;
            for (const auto& s : p.method(m).symbols())
              l.append(nb::make_tuple(s.name, s.min, s.max == INT64_MAX ? nb::object(nb::none()) : nb::int_(s.max)));
            return l;
          },
          "method"_a = nb::none())
      .def(
          "segments",
          [](const ProgramHandle& p, std::optional<std::string> m) {
            nb::list l;
            for (const auto& s : p.method(m).segments()) {
              nb::dict d;
              d["engine"] = s.engine;
              d["backend"] = s.backend;
              d["plan_bytes"] = s.plan_bytes;
              d["from_cache"] = s.from_cache;
              d["ops"] = s.ops;
              d["num_nodes"] = s.num_nodes;
              nb::list fb;
              for (const auto& f : s.fallback) fb.append(nb::make_tuple(f.node, f.op, f.reason));
              d["fallback"] = fb;
              l.append(d);
            }
            return l;
          },
          "method"_a = nb::none())
      .def("partition_report", [](const ProgramHandle& p) { return p.program->partition_report(); })
      .def_prop_ro("device", [](const ProgramHandle& p) { return p.program->device(); });

  nb::class_<SessionHandle>(m, "Session", "A program's state (its buffers) and calls on it; one thread at a time.")
      .def(nb::init<const ProgramHandle&>(), "program"_a)
      .def("run", &SessionHandle::run, "inputs"_a, "method"_a = nb::none(), "stream"_a = nb::none(),
           "outputs"_a = nb::none(),
           "Runs the program on DLPack tensors (host or CUDA memory, no copies). Without `outputs`, returns its "
           "outputs as DLPack arrays, on the device of the first CUDA input, else the host; with `outputs` (one "
           "contiguous tensor per output, of the dtype and sizes output_types() gives, host or CUDA memory), writes "
           "them there and returns None. CUDA work is ordered on `stream` (a cudaStream_t as an int, 0 for CUDA's "
           "legacy default stream; None: kiln's default stream) and the call returns without waiting for it when "
           "the outputs are on the device.")
      .def("output_types", &SessionHandle::output_types, "inputs"_a,
           "Per user output, (dtype name, sizes) of a call with `inputs` (DLPack tensors; only their types are "
           "read): the memory run(..., outputs=) writes; KilnError (code 'unsupported') when the data sets a size.")
      .def("buffer", &SessionHandle::buffer, "fqn"_a, "Buffer `fqn` as an array viewing the session's memory.")
      .def("set_buffer", &SessionHandle::set_buffer, "fqn"_a, "value"_a)
      .def("bind_buffer", &SessionHandle::bind_buffer, "fqn"_a, "memory"_a,
           "Makes the caller's tensor the memory of buffer `fqn`: kiln updates it in place or copies new values into "
           "it.")
      .def("reset", &SessionHandle::reset)
      .def("synchronize", &SessionHandle::synchronize,
           "Waits for the session's device work; raises the device-side error a call left (an index out of range).")
      .def_prop_ro("program", &SessionHandle::program);
}
