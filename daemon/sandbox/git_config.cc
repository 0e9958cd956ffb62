#include "daemon/sandbox/git_config.h"

#include <cctype>
#include <optional>

namespace pando::sandbox {

namespace {

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

class ConfigReader {
 public:
  explicit ConfigReader(const std::string& text) : text_(text) {}

  GitConfigPaths read() {
    GitConfigPaths paths;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++pos_;
      } else if (c == '#' || c == ';') {
        skip_line();
      } else if (c == '[') {
        read_header();
      } else {
        read_variable(paths);
      }
    }
    return paths;
  }

 private:
  void skip_line() {
    while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
  }

  // [section], [section "subsection"] or the old [section.subsection].
  void read_header() {
    ++pos_;
    std::string name;
    while (pos_ < text_.size() && text_[pos_] != ']' && text_[pos_] != ' ' && text_[pos_] != '\t' &&
           text_[pos_] != '\n') {
      name += text_[pos_++];
    }
    has_subsection_ = name.find('.') != std::string::npos;
    section_ = lower(name.substr(0, name.find('.')));
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '"') {
      has_subsection_ = true;
      ++pos_;
      while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\n') {
        if (text_[pos_] == '\\') ++pos_;
        ++pos_;
      }
      ++pos_;
    }
    while (pos_ < text_.size() && text_[pos_] != ']' && text_[pos_] != '\n') ++pos_;
    if (pos_ >= text_.size() || text_[pos_] != ']') section_.clear();  // git refuses it
    ++pos_;
  }

  void read_variable(GitConfigPaths& paths) {
    std::string key;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '-')) {
      key += text_[pos_++];
    }
    if (key.empty()) {
      skip_line();
      return;
    }
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
    if (pos_ >= text_.size() || text_[pos_] != '=') {
      skip_line();  // a boolean without a value, or garbage
      return;
    }
    ++pos_;
    const std::optional<std::string> value = read_value();
    if (!value) return;
    key = lower(key);
    if (key != "path" && key != "hookspath") return;
    if (section_ == "core" && !has_subsection_ && key == "hookspath") {
      paths.hooks_paths.push_back(*value);
    } else if (key == "path" && ((section_ == "include" && !has_subsection_) ||
                                 (section_ == "includeif" && has_subsection_))) {
      paths.include_paths.push_back(*value);
    }
  }

  // Up to the end of the line (continuations joined), quotes and escapes
  // resolved, unquoted surrounding whitespace dropped.
  std::optional<std::string> read_value() {
    std::string value;
    size_t kept = 0;  // length without unquoted trailing whitespace
    bool quoted = false;
    bool started = false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '\n') {
        if (quoted) return std::nullopt;
        break;
      }
      if (!quoted && (c == '#' || c == ';')) {
        skip_line();
        break;
      }
      if (c == '"') {
        quoted = !quoted;
        started = true;
        kept = value.size();
        continue;
      }
      if (c == '\\') {
        if (pos_ >= text_.size()) return std::nullopt;
        const char next = text_[pos_++];
        if (next == '\n') continue;
        static constexpr std::pair<char, char> kEscapes[] = {
            {'n', '\n'}, {'t', '\t'}, {'b', '\b'}, {'"', '"'}, {'\\', '\\'}};
        bool known = false;
        for (const auto& [escape, meaning] : kEscapes) {
          if (next == escape) {
            value += meaning;
            known = true;
          }
        }
        if (!known) return std::nullopt;
        started = true;
        kept = value.size();
        continue;
      }
      if (!quoted && (c == ' ' || c == '\t' || c == '\r')) {
        if (started) value += c;
        continue;
      }
      value += c;
      started = true;
      kept = value.size();
    }
    if (quoted) return std::nullopt;
    value.resize(kept);
    return value;
  }

  const std::string& text_;
  size_t pos_ = 0;
  std::string section_;
  bool has_subsection_ = false;
};

}  // namespace

GitConfigPaths git_config_paths(const std::string& text) { return ConfigReader(text).read(); }

}  // namespace pando::sandbox
