// Typed reads from untrusted JSON (file headers and tables): each failure is
// a kFormat error naming the key and where it was read.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln {

class JsonFields {
 public:
  JsonFields(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}
  Status bad(std::string_view key, std::string_view want) const {
    return format_error(where_ + ": '" + std::string(key) + "' must be " + std::string(want));
  }
  Expected<const nlohmann::json*> get(std::string_view key) const {
    if (!j_.is_object()) return format_error(where_ + " must be a JSON object");
    auto it = j_.find(key);
    if (it == j_.end()) return format_error(where_ + ": '" + std::string(key) + "' is missing");
    return &*it;
  }
  Expected<int64_t> integer(std::string_view key) const {
    KILN_ASSIGN_OR_RETURN(const nlohmann::json* v, get(key));
    if (!v->is_number_integer()) return bad(key, "an integer");
    return v->get<int64_t>();
  }
  Expected<std::string> string(std::string_view key) const {
    KILN_ASSIGN_OR_RETURN(const nlohmann::json* v, get(key));
    if (!v->is_string()) return bad(key, "a string");
    return v->get<std::string>();
  }
  Expected<const nlohmann::json*> array(std::string_view key) const {
    KILN_ASSIGN_OR_RETURN(const nlohmann::json* v, get(key));
    if (!v->is_array()) return bad(key, "an array");
    return v;
  }
  Expected<std::vector<int64_t>> ints(std::string_view key) const {
    KILN_ASSIGN_OR_RETURN(const nlohmann::json* v, array(key));
    std::vector<int64_t> out;
    for (const nlohmann::json& x : *v) {
      if (!x.is_number_integer()) return bad(key, "an array of integers");
      out.push_back(x.get<int64_t>());
    }
    return out;
  }
  Expected<std::vector<std::string>> strings(std::string_view key) const {
    KILN_ASSIGN_OR_RETURN(const nlohmann::json* v, array(key));
    std::vector<std::string> out;
    for (const nlohmann::json& x : *v) {
      if (!x.is_string()) return bad(key, "an array of strings");
      out.push_back(x.get<std::string>());
    }
    return out;
  }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

// Parses `bytes` as one JSON object; `what` names it in the error.
inline Expected<nlohmann::json> parse_json_object(std::span<const uint8_t> bytes, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return format_error(what + " is not a JSON object");
  return j;
}

}  // namespace kiln
