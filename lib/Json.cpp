//===- Json.cpp - a small JSON reader for manifests -----------------------===//

#include "mhc/Support/Json.h"

#include <cstdlib>

namespace mhc::json {

const Value *Value::get(const std::string &key) const {
  if (kind != Object)
    return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

std::string quote(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

namespace {
struct Parser {
  const std::string &s;
  size_t i = 0;
  std::string error;

  bool fail(const std::string &msg) {
    if (error.empty())
      error = msg + " at offset " + std::to_string(i);
    return false;
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'))
      ++i;
  }
  bool lit(const char *word) {
    size_t n = std::char_traits<char>::length(word);
    if (s.compare(i, n, word) != 0)
      return fail(std::string("expected ") + word);
    i += n;
    return true;
  }
  bool string(std::string &out) {
    if (i >= s.size() || s[i] != '"')
      return fail("expected string");
    ++i;
    while (i < s.size() && s[i] != '"') {
      char c = s[i++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size())
        return fail("unterminated escape");
      char e = s[i++];
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u': {
        if (i + 4 > s.size())
          return fail("short \\u escape");
        long code = std::strtol(s.substr(i, 4).c_str(), nullptr, 16);
        if (code > 0x7f)
          return fail("non-ASCII \\u escape");
        out += static_cast<char>(code);
        i += 4;
        break;
      }
      default:
        return fail("bad escape");
      }
    }
    if (i >= s.size())
      return fail("unterminated string");
    ++i;
    return true;
  }
  bool value(Value &v, int depth) {
    if (depth > 64)
      return fail("nesting too deep");
    ws();
    if (i >= s.size())
      return fail("unexpected end");
    char c = s[i];
    if (c == '{') {
      v.kind = Value::Object;
      ++i;
      ws();
      if (i < s.size() && s[i] == '}') {
        ++i;
        return true;
      }
      while (true) {
        ws();
        std::string key;
        if (!string(key))
          return false;
        ws();
        if (i >= s.size() || s[i] != ':')
          return fail("expected ':'");
        ++i;
        if (!value(v.object[key], depth + 1))
          return false;
        ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == '}') {
          ++i;
          return true;
        }
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = Value::Array;
      ++i;
      ws();
      if (i < s.size() && s[i] == ']') {
        ++i;
        return true;
      }
      while (true) {
        v.array.emplace_back();
        if (!value(v.array.back(), depth + 1))
          return false;
        ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == ']') {
          ++i;
          return true;
        }
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Value::String;
      return string(v.string);
    }
    if (c == 't') {
      v.kind = Value::Bool;
      v.boolean = true;
      return lit("true");
    }
    if (c == 'f') {
      v.kind = Value::Bool;
      return lit("false");
    }
    if (c == 'n')
      return lit("null");
    const char *start = s.c_str() + i;
    char *end = nullptr;
    v.kind = Value::Number;
    v.number = std::strtod(start, &end);
    if (end == start)
      return fail("unexpected character");
    i += static_cast<size_t>(end - start);
    return true;
  }
};
} // namespace

bool parse(const std::string &text, Value &out, std::string &error) {
  Parser p{text};
  out = Value();
  if (!p.value(out, 0)) {
    error = p.error;
    return false;
  }
  p.ws();
  if (p.i != text.size()) {
    error = "trailing characters at offset " + std::to_string(p.i);
    return false;
  }
  return true;
}

} // namespace mhc::json
