//===- PTXMerge.cpp - one PTX module from several -------------------------===//

#include "mhc/Support/PTXMerge.h"

#include <set>

namespace {

std::vector<std::string> splitLines(const std::string &text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  lines.push_back(text.substr(start)); // after the last newline ("" if none)
  return lines;
}

bool startsWith(const std::string &s, const char *prefix) {
  return s.rfind(prefix, 0) == 0;
}

/// The first line of a function: declarations end there.
bool isFunction(const std::string &line) {
  for (const char *p : {".visible .entry", ".entry", ".visible .func", ".func",
                        ".weak .func", ".extern .func"})
    if (startsWith(line, p))
      return true;
  return false;
}

/// A module-scope line to keep even when seen before: blank lines and
/// comments ("// .globl NAME" starts each function's section).
bool isLayout(const std::string &line) {
  size_t first = line.find_first_not_of(" \t");
  return first == std::string::npos || line.compare(first, 2, "//") == 0;
}

} // namespace

std::string mhc::mergePTXModules(const std::vector<std::string> &parts) {
  if (parts.empty())
    return "";
  std::string out = parts.front();
  std::set<std::string> declared;
  for (const std::string &line : splitLines(parts.front())) {
    if (isFunction(line))
      break;
    declared.insert(line);
  }
  for (size_t p = 1; p < parts.size(); ++p) {
    if (!out.empty() && out.back() != '\n')
      out += "\n";
    std::vector<std::string> lines = splitLines(parts[p]);
    size_t i = 0;
    while (i < lines.size() && !startsWith(lines[i], ".address_size"))
      ++i;
    if (i == lines.size()) // no header: all of it follows
      i = 0;
    else
      ++i;
    for (; i < lines.size() && !isFunction(lines[i]); ++i)
      if (isLayout(lines[i]) || declared.insert(lines[i]).second)
        out += lines[i] + "\n";
    for (; i < lines.size(); ++i)
      out += lines[i] + (i + 1 < lines.size() ? "\n" : "");
  }
  return out;
}
