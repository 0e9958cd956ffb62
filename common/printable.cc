#include "common/printable.h"

#include <fmt/format.h>

namespace pando {

namespace {

// The length of the well-formed UTF-8 sequence of two to four bytes that starts `text`, and
// its code point; 0 when it is not one (overlong forms, surrogates and values beyond U+10FFFF
// are not).
size_t utf8_sequence(std::string_view text, char32_t& code_point) {
  const auto byte = [&text](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  char32_t minimum = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
    minimum = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    minimum = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    minimum = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  code_point = lead & (0x7f >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i) & 0x3f);
  }
  if (code_point < minimum || code_point > 0x10ffff ||
      (code_point >= 0xd800 && code_point <= 0xdfff)) {
    return 0;
  }
  return length;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const unsigned char c = static_cast<unsigned char>(text.front());
    size_t used = 1;
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else if (char32_t code_point = 0; c >= 0x80 && (used = utf8_sequence(text, code_point))) {
      if (code_point < 0xa0) {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(code_point));
      } else {
        out.append(text.substr(0, used));
      }
    } else {
      used = 1;
      out += fmt::format("\\x{:02x}", c);
    }
    text.remove_prefix(used);
  }
  return out;
}

}  // namespace pando
