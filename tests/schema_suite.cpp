#include "schema_suite.h"

#include <algorithm>
#include <filesystem>

#include <simdjson.h>

namespace picolm::grammar_tests {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The original text of any value (raw_json() exists for objects and arrays only in simdjson 3.0).
std::string raw_text(simdjson::ondemand::value v) {
  switch (v.type()) {
    case simdjson::ondemand::json_type::object: {
      simdjson::ondemand::object o = v.get_object();
      return std::string(std::string_view(o.raw_json()));
    }
    case simdjson::ondemand::json_type::array: {
      simdjson::ondemand::array a = v.get_array();
      return std::string(std::string_view(a.raw_json()));
    }
    default: return std::string(trim(v.raw_json_token()));
  }
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Copies the string literal starting at json[i] (a quote) into out; returns the index after it.
size_t copy_string(std::string_view json, size_t i, std::string& out) {
  out += json[i++];
  while (i < json.size()) {
    const char c = json[i++];
    out += c;
    if (c == '\\' && i < json.size()) out += json[i++];
    else if (c == '"') break;
  }
  return i;
}

}  // namespace

bool load_suite_file(const std::string& path, std::vector<SuiteGroup>& groups, std::string& error) {
  try {
    simdjson::ondemand::parser parser;
    simdjson::padded_string json = simdjson::padded_string::load(path);
    simdjson::ondemand::document doc = parser.iterate(json);
    for (simdjson::ondemand::value gv : doc.get_array()) {
      SuiteGroup g;
      for (simdjson::ondemand::field f : gv.get_object()) {
        const std::string_view key = f.unescaped_key();
        if (key == "description") {
          g.description = std::string(std::string_view(f.value().get_string()));
        } else if (key == "schema") {
          g.schema = raw_text(f.value());
        } else if (key == "tests") {
          for (simdjson::ondemand::value tv : f.value().get_array()) {
            SuiteTest t;
            for (simdjson::ondemand::field tf : tv.get_object()) {
              const std::string_view tk = tf.unescaped_key();
              if (tk == "description") t.description = std::string(std::string_view(tf.value().get_string()));
              else if (tk == "data") t.data = raw_text(tf.value());
              else if (tk == "valid") t.valid = bool(tf.value().get_bool());
            }
            g.tests.push_back(std::move(t));
          }
        }
      }
      groups.push_back(std::move(g));
    }
  } catch (const simdjson::simdjson_error& e) {
    error = path + ": " + e.what();
    return false;
  }
  return true;
}

std::vector<std::string> list_suite_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string json_compact(std::string_view json) {
  std::string out;
  for (size_t i = 0; i < json.size();) {
    if (json[i] == '"') i = copy_string(json, i, out);
    else if (is_ws(json[i])) ++i;
    else out += json[i++];
  }
  return out;
}

std::string json_pretty(std::string_view json, int max_ws_run) {
  const std::string c = json_compact(json);
  std::string out;
  int depth = 0;
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(std::clamp(2 * d, 0, std::max(0, max_ws_run - 1))), ' ');
  };
  for (size_t i = 0; i < c.size();) {
    const char ch = c[i];
    if (ch == '"') {
      i = copy_string(c, i, out);
    } else if (ch == '{' || ch == '[') {
      out += ch;
      ++i;
      if (i < c.size() && (c[i] == '}' || c[i] == ']')) {
        out += c[i++];  // empty container stays "{}" / "[]"
      } else {
        newline(++depth);
      }
    } else if (ch == '}' || ch == ']') {
      newline(--depth);
      out += ch;
      ++i;
    } else if (ch == ',') {
      out += ch;
      newline(depth);
      ++i;
    } else if (ch == ':') {
      out += ": ";
      ++i;
    } else {
      out += ch;
      ++i;
    }
  }
  return out;
}

}  // namespace picolm::grammar_tests
