#include "kiln/check.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/device_copy.h"

namespace kiln {

bool CheckReport::pass() const {
  return !tensors.empty() && std::all_of(tensors.begin(), tensors.end(), [](const auto& t) { return t.pass; });
}

double CheckReport::max_abs() const {
  double m = 0;
  for (const auto& t : tensors) m = std::max(m, t.max_abs);
  return m;
}

double CheckReport::max_rel() const {
  double m = 0;
  for (const auto& t : tensors) m = std::max(m, t.max_rel);
  return m;
}

Expected<std::optional<Tolerance>> manifest_tolerance(const std::string& io_path, const SafetensorsFile& io) {
  auto named = io.metadata.find("fixture");
  if (named == io.metadata.end()) return std::optional<Tolerance>{};
  const std::filesystem::path io_file(io_path);
  const std::filesystem::path manifest = io_file.parent_path() / "manifest.json";
  const std::string where = manifest.string();
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(manifest, ec);
  if (st.type() == std::filesystem::file_type::not_found) return std::optional<Tolerance>{};
  if (ec) return io_error(where + ": " + ec.message());
  if (st.type() != std::filesystem::file_type::regular) return io_error(where + ": not a regular file");
  std::ifstream in(manifest);
  if (!in) return io_error(where + ": cannot be read");
  nlohmann::json m = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) return format_error(where + ": not a JSON object");
  if (!m.contains("fixtures") || !m["fixtures"].is_array()) return format_error(where + ": no \"fixtures\" list");
  for (const nlohmann::json& f : m["fixtures"]) {
    if (!f.is_object() || !f.contains("name") || f["name"] != named->second) continue;
    const std::string entry = where + ": fixture '" + named->second + "'";
    // The entry must be for this io file, not another of the same name.
    if (!f.contains("files") || !f["files"].is_object() || !f["files"].contains("io") ||
        f["files"]["io"] != io_file.filename().string())
      continue;
    if (!f.contains("tolerance") || !f["tolerance"].is_object()) return format_error(entry + " has no tolerance");
    Tolerance tol;
    for (auto [key, value] : {std::pair{"rtol", &tol.rtol}, std::pair{"atol", &tol.atol}}) {
      const nlohmann::json& t = f["tolerance"];
      if (!t.contains(key) || !t[key].is_number() || !std::isfinite(t[key].get<double>()) || t[key].get<double>() < 0)
        return format_error(entry + ": tolerance." + key + " must be a finite number >= 0");
      *value = t[key].get<double>();
    }
    return std::optional<Tolerance>(tol);
  }
  return std::optional<Tolerance>{};
}

Tolerance tolerance_at_precision(Tolerance tol, Precision precision) {
  if (precision == Precision::kFp32) return tol;
  // FP8 weights: 3 mantissa bits, each weight within 1/16 of itself.
  if (precision == Precision::kFp8w)
    return {std::max(tol.rtol, 1e-1), std::max(tol.atol, 1e-1), std::max(tol.atol_of_largest, 5e-2)};
  return {std::max(tol.rtol, 5e-2), std::max(tol.atol, 5e-2), std::max(tol.atol_of_largest, 1e-2)};
}

TensorComparison compare_tensors(const std::string& name, const Tensor& got, const Tensor& want, Tolerance tol) {
  TensorComparison c;
  c.name = name;
  c.got_type = got.type_string();
  c.want_type = want.type_string();
  if (got.dtype() != want.dtype()) {
    c.problem = "dtype differs";
    return c;
  }
  if (got.sizes() != want.sizes()) {
    c.problem = "shape differs";
    return c;
  }
  const int64_t n = got.numel();
  if (!is_floating(want.dtype())) {
    c.exact = true;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t a = got.int_at(i), b = want.int_at(i);
      if (a != b) {
        ++bad;
        c.max_abs = std::max(c.max_abs, std::fabs(static_cast<double>(a) - static_cast<double>(b)));
      }
    }
    c.pass = bad == 0;
    if (!c.pass) c.problem = std::to_string(bad) + " of " + std::to_string(n) + " elements differ";
    return c;
  }
  // Reduced-precision outputs cannot be closer than their own rounding.
  if (want.dtype() == DType::Float16) {
    tol.rtol = std::max(tol.rtol, 1e-3);
    tol.atol = std::max(tol.atol, 1e-3);
  } else if (want.dtype() == DType::BFloat16) {
    tol.rtol = std::max(tol.rtol, 1.6e-2);
    tol.atol = std::max(tol.atol, 1e-2);
  }
  int64_t bad = 0;
  Tensor g = got.to(DType::Float64).contiguous(), w = want.to(DType::Float64).contiguous();
  const double* gp = g.data<double>();
  const double* wp = w.data<double>();
  if (tol.atol_of_largest > 0) {
    double largest = 0;
    for (int64_t i = 0; i < n; ++i)
      if (std::isfinite(wp[i])) largest = std::max(largest, std::fabs(wp[i]));
    tol.atol = std::max(tol.atol, tol.atol_of_largest * largest);
  }
  for (int64_t i = 0; i < n; ++i) {
    double a = gp[i], b = wp[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) ++bad;
      continue;
    }
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) ++bad;
      continue;
    }
    double d = std::fabs(a - b);
    c.max_abs = std::max(c.max_abs, d);
    if (std::fabs(b) > tol.atol) c.max_rel = std::max(c.max_rel, d / std::fabs(b));
    if (d > tol.atol + tol.rtol * std::fabs(b)) ++bad;
  }
  c.pass = bad == 0;
  if (!c.pass) c.problem = std::to_string(bad) + " of " + std::to_string(n) + " elements outside tolerance";
  return c;
}

namespace {

// Collects "<prefix>input.<i>" tensors in index order; no gaps allowed.
Expected<std::vector<Tensor>> numbered(const SafetensorsFile& io, const std::string& prefix) {
  std::map<int64_t, Tensor> found;
  for (const auto& [name, t] : io.tensors) {
    if (!name.starts_with(prefix)) continue;
    std::string rest = name.substr(prefix.size());
    // At most 9 digits: an index that large is already far past any program's arity.
    if (rest.empty() || rest.size() > 9 || !std::all_of(rest.begin(), rest.end(), ::isdigit)) continue;
    found[std::stoll(rest)] = t;
  }
  std::vector<Tensor> out;
  for (auto& [i, t] : found) {
    if (i != static_cast<int64_t>(out.size()))
      return format_error("the I/O file has no tensor '" + prefix + std::to_string(out.size()) + "'");
    out.push_back(t);
  }
  return out;
}

}  // namespace

Expected<CheckReport> check_fixture(const std::shared_ptr<const Program>& program, const SafetensorsFile& io,
                                    Tolerance tol, bool bind_buffers) {
  // Which calls does the file record?
  std::vector<std::string> prefixes;
  if (io.find("input.0") || io.find("output.0")) prefixes.push_back("");
  for (int k = 0;; ++k) {
    std::string p = "step" + std::to_string(k) + ".";
    bool any = std::any_of(io.tensors.begin(), io.tensors.end(), [&](const auto& e) { return e.first.starts_with(p); });
    if (!any) break;
    prefixes.push_back(p);
  }
  if (prefixes.empty())
    return format_error("the I/O file records no call (expected input.<i>/output.<j> or step<k>.input.<i>)");

  CheckReport report;
  Session session(program);
  std::map<std::string, Tensor> bound;  // the caller's memory, by buffer
  if (bind_buffers) {
    for (const TensorSpec& b : program->buffers()) {
      KILN_ASSIGN_OR_RETURN(Tensor initial, session.buffer(b.name));
      // Memory where the session keeps its state (a CUDA program's: device
      // memory, as a caller owning its KV caches on the GPU binds them).
      Tensor memory;
      if (initial.is_cpu()) {
        memory = initial.clone();
      } else {
        const engine::DeviceMemory* device = runtime::device_memory_of(initial.device());
        if (!device) return internal_error("buffer '" + b.name + "' lies on " + initial.device().to_string());
        KILN_ASSIGN_OR_RETURN(memory, device->empty(initial.dtype(), initial.sizes()));
        KILN_TRY(copy_tensor(memory, initial));
      }
      KILN_TRY(session.bind_buffer(b.name, memory));
      bound.emplace(b.name, memory);
    }
  }
  for (const std::string& p : prefixes) {
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> inputs, numbered(io, p + "input."));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> expected, numbered(io, p + "output."));
    std::string call = p.empty() ? "the call" : p.substr(0, p.size() - 1);
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, session.run(inputs));
    ++report.calls;
    if (outputs.size() != expected.size())
      return invalid_argument(call + " returned " + std::to_string(outputs.size()) + " outputs, the I/O file expects " +
                              std::to_string(expected.size()));
    for (size_t j = 0; j < outputs.size(); ++j)
      report.tensors.push_back(compare_tensors(p + "output." + std::to_string(j), outputs[j], expected[j], tol));
  }
  const std::string fb = "final.buffer.";
  for (const auto& [name, want] : io.tensors) {
    if (!name.starts_with(fb)) continue;
    const std::string buffer = name.substr(fb.size());
    KILN_ASSIGN_OR_RETURN(Tensor got, session.buffer(buffer));
    if (auto it = bound.find(std::string(program->canonical_name(buffer))); it != bound.end()) {
      if (got.storage() != it->second.storage())
        return internal_error("buffer '" + buffer + "' no longer lies in the memory bound to it");
      got = it->second;
    }
    KILN_ASSIGN_OR_RETURN(got, to_host(got));  // the caller's explicit copy of a device buffer
    report.tensors.push_back(compare_tensors(name, got, want, tol));
  }
  return report;
}

}  // namespace kiln
