//===- Json.h - a small JSON reader for manifests ---------------*- C++ -*-===//
//
// Enough JSON for the files mhc writes (objects, arrays, strings without
// unicode escapes beyond \uXXXX ASCII, numbers, booleans, null), so the
// runtime can read manifests without third-party code. Parse errors are
// reported, never thrown.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_SUPPORT_JSON_H
#define MHC_SUPPORT_JSON_H

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mhc::json {

struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Value> array;
  std::map<std::string, Value> object;

  /// Member lookup; nullptr when absent or not an object.
  const Value *get(const std::string &key) const;
  bool isNumber() const { return kind == Number; }
  bool isString() const { return kind == String; }
  bool isArray() const { return kind == Array; }
  bool isObject() const { return kind == Object; }
};

/// Parses `text`; on failure returns false and sets `error` (with offset).
bool parse(const std::string &text, Value &out, std::string &error);

/// `s` as a JSON string literal ('"' and '\\' escaped; mhc's strings have no
/// control characters).
std::string quote(const std::string &s);

} // namespace mhc::json

#endif // MHC_SUPPORT_JSON_H
