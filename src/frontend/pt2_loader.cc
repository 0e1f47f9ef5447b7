// The .pt2 container: zip checks, model JSON, weights and constants.
#include "frontend/pt2_loader.h"

#include <map>

#include <nlohmann/json.hpp>

#include "frontend/zip_reader.h"

namespace kiln::frontend {

using json = nlohmann::json;

namespace {

std::string_view as_text(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

struct Archive {
  const ZipArchive& zip;
  std::string root;  // "<root>/"

  const ZipEntry* find(const std::string& rel) const { return zip.find(root + rel); }
  std::string where(const std::string& rel) const { return zip.path() + ": entry '" + root + rel + "'"; }

  Expected<std::string_view> text(const std::string& rel) const {
    const ZipEntry* e = find(rel);
    if (!e) return not_found(zip.path() + ": missing entry '" + root + rel + "'");
    KILN_ASSIGN_OR_RETURN(auto bytes, zip.read(*e));
    return as_text(bytes);
  }
};

// Recognizes layouts kiln cannot read and says what to do.
Status check_layout(const ZipArchive& zip, const std::string& root) {
  if (zip.find("serialized_exported_program.json") || zip.find(root + "serialized_exported_program.json"))
    return unsupported(zip.path() + ": this is a .pt2 archive from PyTorch 2.7 or older, whose weights are pickled; "
                                    "kiln never unpickles. Re-save it with torch.export.save under PyTorch 2.9 or newer");
  if (!zip.find(root + "archive_format"))
    return format_error(FileFault::kBadMagic, zip.path() + ": not a torch.export archive (no '" + root + "archive_format' entry)");
  return Status::ok();
}

struct PayloadMeta {
  std::string path_name;
  bool use_pickle = false;
  json tensor_meta;
};

Expected<std::map<std::string, PayloadMeta>> read_payload_config(const Archive& a, const std::string& rel) {
  std::map<std::string, PayloadMeta> out;
  const ZipEntry* e = a.find(rel);
  if (!e) return out;  // no weights of this kind
  KILN_ASSIGN_OR_RETURN(std::string_view text, a.text(rel));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& err) {
    return format_error(a.where(rel) + ": malformed JSON at byte " + std::to_string(err.byte));
  } catch (const json::exception& err) {  // e.g. a number too large for a double
    return format_error(a.where(rel) + ": malformed JSON: " + err.what());
  }
  const json& cfg = j.is_object() && j.contains("config") ? j["config"] : json();
  if (!cfg.is_object()) return format_error(a.where(rel) + ": expected {\"config\": {...}}");
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const json& v = it.value();
    PayloadMeta p;
    if (!v.is_object() || !v.contains("path_name") || !v["path_name"].is_string())
      return format_error(a.where(rel) + ": entry '" + it.key() + "' has no path_name");
    p.path_name = v["path_name"].get<std::string>();
    p.use_pickle = v.contains("use_pickle") && v["use_pickle"].is_boolean() && v["use_pickle"].get<bool>();
    if (v.contains("tensor_meta")) p.tensor_meta = v["tensor_meta"];
    out.emplace(it.key(), std::move(p));
  }
  return out;
}

Expected<int64_t> json_symint(const json& j, const std::string& where) {
  if (j.is_object() && j.contains("as_int") && j["as_int"].is_number_integer()) return j["as_int"].get<int64_t>();
  return format_error(where + ": expected a static integer size or stride, got " + j.dump().substr(0, 60));
}

// Rebuilds one weight from its blob and metadata; blobs shared by several
// weights become one storage so that aliasing is kept.
Expected<Tensor> load_weight(const Archive& a, const std::string& folder, const std::string& fqn, const PayloadMeta& p,
                             std::map<std::string, std::shared_ptr<Storage>>& storages) {
  std::string where = a.zip.path() + ": weight '" + fqn + "'";
  if (p.use_pickle)
    return unsupported(where + " is a pickled tensor subclass; kiln never unpickles (save plain tensors instead)");
  if (p.path_name.find('/') != std::string::npos || p.path_name.find("..") != std::string::npos)
    return format_error(FileFault::kPathEscape, where + ": path_name '" + p.path_name + "' escapes the " + folder + " folder");
  const json& tm = p.tensor_meta;
  if (!tm.is_object()) return format_error(where + ": missing tensor_meta");
  if (!tm.contains("dtype") || !tm["dtype"].is_number_integer()) return format_error(where + ": tensor_meta without dtype");
  auto dt = dtype_from_pt2_code(tm["dtype"].get<int64_t>());
  if (!dt) return format_error(FileFault::kUnknownDtype, where + ": unknown or unsupported dtype code " + std::to_string(tm["dtype"].get<int64_t>()));
  if (is_complex(*dt))
    return unsupported(where + " is " + std::string(dtype_name(*dt)) +
                       "; kiln holds no complex tensors (complex values computed inside a program are split into real "
                       "and imaginary parts)");
  Shape sizes, strides;
  if (!tm.contains("sizes") || !tm["sizes"].is_array() || !tm.contains("strides") || !tm["strides"].is_array())
    return format_error(where + ": tensor_meta without sizes or strides");
  for (const json& s : tm["sizes"]) {
    KILN_ASSIGN_OR_RETURN(int64_t v, json_symint(s, where));
    sizes.push_back(v);
  }
  for (const json& s : tm["strides"]) {
    KILN_ASSIGN_OR_RETURN(int64_t v, json_symint(s, where));
    strides.push_back(v);
  }
  int64_t offset = 0;
  if (tm.contains("storage_offset")) {
    KILN_ASSIGN_OR_RETURN(offset, json_symint(tm["storage_offset"], where));
  }
  std::string rel = folder + p.path_name;
  auto it = storages.find(rel);
  if (it == storages.end()) {
    const ZipEntry* e = a.find(rel);
    if (!e) return not_found(where + ": blob '" + a.root + rel + "' is missing from the archive");
    KILN_ASSIGN_OR_RETURN(auto st, a.zip.storage(*e));
    if (st->nbytes() % dtype_size(*dt) != 0)
      return format_error(FileFault::kSizeMismatch, where + ": blob '" + a.root + rel + "' holds " + std::to_string(st->nbytes()) +
                          " bytes, not a whole number of " + std::string(dtype_name(*dt)) + " elements");
    it = storages.emplace(rel, std::move(st)).first;
  }
  auto t = Tensor::from_storage(it->second, *dt, sizes, strides, offset);
  if (!t.has_value()) return format_error(where + " (blob '" + a.root + rel + "'): " + t.status().message());
  return *t;
}

}  // namespace

Expected<ir::Module> load_pt2(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::open(path));
  return load_pt2_archive(std::move(zip), path);
}

Expected<ir::Module> parse_pt2(std::shared_ptr<Storage> bytes, const std::string& display_name) {
  KILN_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::from_bytes(std::move(bytes), display_name));
  return load_pt2_archive(std::move(zip), display_name);
}

Expected<ir::Module> load_pt2_archive(ZipArchive zip, const std::string& path) {
  if (zip.entries().empty()) return format_error(path + ": the archive is empty");
  const std::string& first = zip.entries().front().name;
  std::string root = first.find('/') == std::string::npos ? "" : first.substr(0, first.find('/') + 1);
  KILN_TRY(check_layout(zip, root));
  Archive a{zip, root};

  KILN_ASSIGN_OR_RETURN(std::string_view fmt, a.text("archive_format"));
  if (fmt != "pt2") return format_error(FileFault::kBadMagic, a.where("archive_format") + ": expected 'pt2', found '" + std::string(fmt.substr(0, 20)) + "'");
  if (a.find("archive_version")) {
    KILN_ASSIGN_OR_RETURN(std::string_view ver, a.text("archive_version"));
    if (ver != "0") return format_error(FileFault::kBadVersion, a.where("archive_version") + ": archive version '" + std::string(ver.substr(0, 20)) + "' is not supported (kiln reads 0)");
  }
  if (a.find("byteorder")) {
    KILN_ASSIGN_OR_RETURN(std::string_view bo, a.text("byteorder"));
    if (bo != "little") return unsupported(a.where("byteorder") + ": weights were written on a '" + std::string(bo.substr(0, 20)) + "'-endian machine");
  }
  if (!a.find("models/model.json")) {
    if (a.find("data/weights/model.pt"))
      return unsupported(path + ": this archive keeps its weights pickled (PyTorch 2.8 layout); kiln never unpickles. "
                                "Re-save it with torch.export.save under PyTorch 2.9 or newer");
    return not_found(path + ": missing entry '" + root + "models/model.json'");
  }
  KILN_ASSIGN_OR_RETURN(std::string_view model_json, a.text("models/model.json"));
  KILN_ASSIGN_OR_RETURN(ir::Module m, parse_exported_program_json(model_json, path + ": " + root + "models/model.json"));
  m.source = path;

  if (!a.find("data/weights/model_weights_config.json") && a.find("data/weights/model.pt"))
    return unsupported(path + ": this archive keeps its weights pickled (PyTorch 2.8 layout); kiln never unpickles. "
                              "Re-save it with torch.export.save under PyTorch 2.9 or newer");
  KILN_ASSIGN_OR_RETURN(auto weights_cfg, read_payload_config(a, "data/weights/model_weights_config.json"));
  KILN_ASSIGN_OR_RETURN(auto constants_cfg, read_payload_config(a, "data/constants/model_constants_config.json"));

  std::map<std::string, std::shared_ptr<Storage>> storages;
  for (size_t i = 0; i < m.input_specs.size(); ++i) {
    const ir::InputSpec& s = m.input_specs[i];
    if (s.kind == ir::InputSpec::Kind::kUserInput || m.weights.count(s.target)) continue;
    bool in_weights = s.kind == ir::InputSpec::Kind::kParameter || (s.kind == ir::InputSpec::Kind::kBuffer && s.persistent);
    const auto& cfg = in_weights ? weights_cfg : constants_cfg;
    auto it = cfg.find(s.target);
    if (it == cfg.end())
      return not_found(path + ": " + input_kind_name(s.kind) + " '" + s.target + "' is not listed in " + root +
                       (in_weights ? "data/weights/model_weights_config.json" : "data/constants/model_constants_config.json"));
    KILN_ASSIGN_OR_RETURN(Tensor t, load_weight(a, in_weights ? "data/weights/" : "data/constants/", s.target, it->second, storages));
    // The graph's own metadata must agree with the blob's.
    const ir::Value* v = m.graph.inputs()[i];
    if (t.dtype() != v->type.dtype || static_cast<size_t>(t.dim()) != v->type.sizes.size())
      return format_error(path + ": " + input_kind_name(s.kind) + " '" + s.target + "' is stored as " + t.type_string() +
                          " but the graph declares " + v->type.to_string());
    for (size_t d = 0; d < v->type.sizes.size(); ++d)
      if (v->type.sizes[d].is_static() && v->type.sizes[d].value != t.sizes()[d])
        return format_error(path + ": " + input_kind_name(s.kind) + " '" + s.target + "' is stored as " + t.type_string() +
                            " but the graph declares " + v->type.to_string());
    m.weights.emplace(s.target, std::move(t));
  }
  return m;
}

}  // namespace kiln::frontend
