// Strict JSON <-> struct mapping for config structs: one field list drives both directions.
#pragma once
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/util/error.h"

namespace fbt {

/// String names of an enum's values, for enums stored as JSON strings. Specialised next to
/// each enum: `template <> inline const EnumNames<Fusion>& enum_names() {...}`.
template <class E>
using EnumNames = std::vector<std::pair<E, std::string>>;
template <class E>
const EnumNames<E>& enum_names();

template <class E>
std::string enum_to_string(E v) {
  for (const auto& [value, name] : enum_names<E>())
    if (value == v) return name;
  throw Error("internal: enum value without a name");
}

/// Parses `s` as one of the names of E; throws fbt::Error naming `what` and the valid names.
template <class E>
E enum_from_string(const std::string& s, const std::string& what) {
  std::string valid;
  for (const auto& [value, name] : enum_names<E>()) {
    if (name == s) return value;
    valid += (valid.empty() ? "" : ", ") + name;
  }
  throw Error(what + ": unknown value '" + s + "' (expected one of: " + valid + ")");
}

/// Writes one field into `j` (enums as strings).
template <class T>
void write_field(nlohmann::json& j, const std::string& key, const T& v) {
  if constexpr (std::is_enum_v<T>)
    j[key] = enum_to_string(v);
  else
    j[key] = v;
}

/// Reads `j` (the value of field `what`) into `out`, checking its JSON type; throws fbt::Error
/// naming `what` and the expected type.
template <class T>
void read_field(const nlohmann::json& j, const std::string& what, T& out) {
  auto fail = [&](const char* expected) { throw Error(what + ": expected " + expected + ", got " + j.dump()); };
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) fail("true or false");
    out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer()) fail("an integer");
    // nlohmann converts with a cast: 18446744073709551615 would become -1, and -1 a huge seed.
    const bool fits = j.is_number_unsigned() ? j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                                             : std::is_signed_v<T> || j.get<int64_t>() >= 0;
    if (!fits) fail(std::is_signed_v<T> ? "an integer in [-2^63, 2^63-1]" : "an integer in [0, 2^64-1]");
    out = j.get<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) fail("a number");
    out = j.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) fail("a string");
    out = j.get<std::string>();
  } else if constexpr (std::is_enum_v<T>) {
    if (!j.is_string()) fail("a string");
    out = enum_from_string<T>(j.get<std::string>(), what);
  } else {
    out = j;  // structured fields (vectors, nested structs) use their own from_json
  }
}

/// The message of a JSON-library exception without the parser's "last read: '...'" echo of the
/// input (which can be kilobytes long), for errors that name the file themselves.
inline std::string json_error_brief(const nlohmann::json::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find("; last read"));
}

/// The value of field `key` of the JSON object `j` as T, type-checked by read_field; throws
/// fbt::Error naming `what` (the file, or file: section) and the key when `j` is not an object,
/// the key is missing, or its value has the wrong JSON type. For files fbt reads back.
template <class T>
T required_field(const nlohmann::json& j, const std::string& key, const std::string& what) {
  if (!j.is_object()) throw Error(what + ": expected a JSON object, got " + j.dump().substr(0, 80));
  const auto it = j.find(key);
  if (it == j.end()) throw Error(what + ": field '" + key + "' is missing");
  T out{};
  read_field(*it, what + ": field '" + key + "'", out);
  return out;
}

/// Range check of a numeric setting: throws fbt::Error "KEY must be in [lo, hi] (got V)" (a round
/// bracket for an excluded end) unless V is finite and inside. `key` names the setting as the user
/// writes it in --set (e.g. "train.lr").
template <class T>
void check_setting(const std::string& key, T v, T lo, T hi, bool lo_open = false, bool hi_open = false) {
  bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(v);
  if (ok) return;
  std::ostringstream o;
  o << key << " must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]") << " (got " << v
    << ")";
  throw Error(o.str());
}

/// Serialises a struct whose fields are listed by `s.visit(f)` (f(name, member) per field).
template <class S>
nlohmann::json fields_to_json(const S& s) {
  nlohmann::json j = nlohmann::json::object();
  const_cast<S&>(s).visit([&](const char* name, const auto& v) { write_field(j, name, v); });
  return j;
}

/// Strict parse into `s` (fields absent from `j` keep their values): unknown keys and wrong
/// types throw fbt::Error naming `source` and the key.
template <class S>
void fields_from_json(const nlohmann::json& j, const std::string& source, S& s) {
  if (!j.is_object()) throw Error(source + ": expected a JSON object");
  std::vector<std::string> known;
  s.visit([&](const char* name, auto&) { known.emplace_back(name); });
  for (const auto& item : j.items()) {
    bool found = false;
    for (const auto& k : known) found = found || k == item.key();
    if (!found) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw Error(source + ": unknown key '" + item.key() + "' (known keys: " + list + ")");
    }
  }
  s.visit([&](const char* name, auto& v) {
    if (j.contains(name)) read_field(j.at(name), source + ": field '" + name + "'", v);
  });
}

}  // namespace fbt
