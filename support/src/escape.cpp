// The escaping rules of escape.h.
#include "policyc/support/escape.h"

#include <cstdint>
#include <cstdio>

namespace policyc::escape {
namespace {

bool printableAscii(unsigned char c) { return c >= 0x20 && c < 0x7f; }

void appendHex(std::string& out, unsigned char c, char lead = '\\') {
  static constexpr char kDigits[] = "0123456789abcdef";
  out += lead;
  if (lead == '\\') out += 'x';
  out += kDigits[c >> 4];
  out += kDigits[c & 15];
}

// FNV-1a, 64 bits: a stable short name for an over-long text (not a security boundary).
uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool fileNameChar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

constexpr size_t kMaxFileName = 200;

// Every rule below: bytes `keep` accepts stay, every other byte is written by `encode`.
template <typename Keep, typename Encode>
std::string encodeBytes(std::string_view text, Keep keep, Encode encode) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (keep(c)) {
      out += static_cast<char>(c);
    } else {
      encode(out, c);
    }
  }
  return out;
}

void hex(std::string& out, unsigned char c) { appendHex(out, c); }

void octal(std::string& out, unsigned char c) {
  char digits[5];
  std::snprintf(digits, sizeof digits, "\\%03o", static_cast<unsigned>(c));
  out += digits;
}

}  // namespace

std::string message(std::string_view text) { return encodeBytes(text, printableAscii, hex); }

std::string cComment(std::string_view text) {
  return encodeBytes(text, [](unsigned char c) { return printableAscii(c) && c != '\\' && c != '*' && c != '?'; }, hex);
}

std::string cString(std::string_view text) {
  return encodeBytes(text, [](unsigned char c) { return printableAscii(c) && c != '\\' && c != '"' && c != '?'; }, octal);
}

std::string cIdentifier(std::string_view text, size_t maxLen) {
  std::string out;
  for (unsigned char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) {
      out += static_cast<char>(c);
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  if (out.size() > maxLen) out.resize(maxLen);
  if (out.empty() || (out[0] >= '0' && out[0] <= '9')) out.insert(0, "m_");
  return out;
}

std::string printable(std::string_view text) {
  return encodeBytes(text, [](unsigned char c) { return printableAscii(c) && c != '\\' && c != '"'; }, hex);
}

std::string dot(std::string_view text) {
  return encodeBytes(text, [](unsigned char c) { return printableAscii(c) && c != '\\' && c != '"'; },
                     [](std::string& out, unsigned char c) {
                       if (c == '"' || c == '\\') {
                         out += '\\';
                         out += static_cast<char>(c);
                       } else {
                         out += '\\';  // \\ then xNN: Graphviz shows the four characters \xNN
                         appendHex(out, c);
                       }
                     });
}

std::string html(std::string_view text) {
  return encodeBytes(text, [](unsigned char c) { return printableAscii(c) && c != '&' && c != '<' && c != '>' && c != '"' && c != '\''; },
                     [](std::string& out, unsigned char c) {
                       switch (c) {
                         case '&': out += "&amp;"; break;
                         case '<': out += "&lt;"; break;
                         case '>': out += "&gt;"; break;
                         case '"': out += "&quot;"; break;
                         case '\'': out += "&#39;"; break;
                         default: appendHex(out, c);
                       }
                     });
}

std::string fileName(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (fileNameChar(c) && !(i == 0 && c == '.')) {
      out += static_cast<char>(c);
    } else {
      appendHex(out, c, '%');
    }
  }
  if (out.empty()) out = "%";  // the empty name: '%' alone is no encoding of anything else
  if (out.size() > kMaxFileName) {
    char hash[20];
    std::snprintf(hash, sizeof hash, "~%016llx", static_cast<unsigned long long>(fnv1a(text)));
    out.resize(kMaxFileName - 17);
    // Do not leave half of a %XX behind.
    size_t pct = out.rfind('%');
    if (pct != std::string::npos && pct + 3 > out.size()) out.resize(pct);
    out += hash;
  }
  return out;
}

std::optional<std::string> fileNameToText(std::string_view name) {
  if (name == "%") return std::string();
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    if (c == '%') {
      if (i + 2 >= name.size()) return std::nullopt;
      auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        return -1;
      };
      int hi = hex(name[i + 1]), lo = hex(name[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (fileNameChar(c) && !(i == 0 && c == '.')) {
      out += static_cast<char>(c);
    } else {
      return std::nullopt;
    }
  }
  if (fileName(out) != name) return std::nullopt;  // hashed, or not in canonical form
  return out;
}

}  // namespace policyc::escape
