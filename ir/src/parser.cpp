// The .pir parser: a small lexer and recursive descent; errors carry file:line:col.
#include <charconv>
#include <cmath>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/ir/verifier.h"
#include "policyc/support/escape.h"
#include "policyc/support/sizes.h"

namespace policyc::ir {
namespace {

enum class Tok { End, Ident, Value, String, Number, Punct };

struct Token {
  Tok kind = Tok::End;
  std::string text;  // identifier, value name (without %), string contents, number text, punctuation
  int line = 1;
  int col = 1;
};

const char* tokName(Tok k) {
  switch (k) {
    case Tok::End: return "end of file";
    case Tok::Ident: return "identifier";
    case Tok::Value: return "value";
    case Tok::String: return "string";
    case Tok::Number: return "number";
    case Tok::Punct: return "punctuation";
  }
  return "?";
}

bool isIdentStart(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

class Lexer {
 public:
  Lexer(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  [[noreturn]] void error(int line, int col, const std::string& message) const {
    fail("{}:{}:{}: {}", source_, line, col, message);
  }

  Token next() {
    skipSpace();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= text_.size()) return t;
    char c = text_[pos_];
    if (c == '%') {
      advance();
      t.kind = Tok::Value;
      if (pos_ < text_.size() && text_[pos_] == '"') {
        t.text = readString(t);
      } else {
        t.text = readIdent();
        if (t.text.empty()) error(t.line, t.col, "expected a value name after '%'");
      }
      return t;
    }
    if (c == '"') {
      t.kind = Tok::String;
      t.text = readString(t);
      return t;
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) {
      t.kind = Tok::Number;
      size_t start = pos_;
      advance();
      while (pos_ < text_.size()) {
        char d = text_[pos_];
        bool exponentSign = (d == '-' || d == '+') && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E');
        if (!(std::isalnum(static_cast<unsigned char>(d)) || d == '.' || exponentSign)) break;
        advance();
      }
      t.text = std::string(text_.substr(start, pos_ - start));
      return t;
    }
    if (isIdentStart(c)) {
      t.kind = Tok::Ident;
      t.text = readIdent();
      return t;
    }
    if (std::string_view("(){}[],:=@").find(c) != std::string_view::npos) {
      t.kind = Tok::Punct;
      t.text = std::string(1, c);
      advance();
      return t;
    }
    error(t.line, t.col, fmt::format("unexpected character '{}'", c));
  }

 private:
  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skipSpace() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') advance();
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else {
        break;
      }
    }
  }
  std::string readIdent() {
    size_t start = pos_;
    while (pos_ < text_.size() && isIdentStart(text_[pos_])) advance();
    return std::string(text_.substr(start, pos_ - start));
  }
  std::string readString(const Token& t) {
    advance();  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') error(t.line, t.col, "unterminated string");
      char c = text_[pos_];
      advance();
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) error(t.line, t.col, "unterminated string");
      char e = text_[pos_];
      advance();
      if (e == 'x') {
        if (pos_ + 2 > text_.size()) error(line_, col_, "expected two hex digits after \\x");
        unsigned value = 0;
        auto [p, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 2, value, 16);
        if (ec != std::errc() || p != text_.data() + pos_ + 2) error(line_, col_, "expected two hex digits after \\x");
        advance();
        advance();
        out += static_cast<char>(value);
      } else {
        out += e;
      }
    }
  }

  std::string_view text_;
  std::string_view source_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view source, std::span<const std::byte> sidecar)
      : lex_(text, source), sidecar_(sidecar) {
    tok_ = lex_.next();
  }

  std::unique_ptr<Graph> parse() {
    expectIdent("graph");
    graph_ = std::make_unique<Graph>(parseName("a graph name"));
    expect("(");
    if (!is("(")) {
      while (!is(")")) {
        Token at = tok_;
        std::string name = expectValueName();
        expect(":");
        TensorType type = parseType();
        define(at, name);
        values_[name] = graph_->addInput(name, type);
        placed(values_[name]->producer(), at);
        if (!is(")")) expect(",");
      }
    }
    expect(")");
    expect("{");
    while (!(tok_.kind == Tok::Ident && tok_.text == "return")) parseStatement();
    parseReturn();
    expect("}");
    if (tok_.kind != Tok::End) errorHere("expected end of file after '}'");
    try {
      verify(*graph_);
    } catch (const VerifyError& e) {
      // Point at the node's statement; a problem of the whole graph at its first line.
      auto it = e.node() ? positions_.find(e.node()) : positions_.end();
      if (it != positions_.end()) lex_.error(it->second.first, it->second.second, e.what());
      lex_.error(1, 1, e.what());
    }
    return std::move(graph_);
  }

 private:
  [[noreturn]] void errorAt(const Token& t, const std::string& message) const { lex_.error(t.line, t.col, message); }
  [[noreturn]] void errorHere(const std::string& expected) const {
    std::string got = tok_.kind == Tok::End ? "end of file" : fmt::format("{} '{}'", tokName(tok_.kind), tok_.text);
    errorAt(tok_, fmt::format("{}, got {}", expected, got));
  }
  void placed(const Node* node, const Token& at) {
    positions_[node] = {at.line, at.col};
    if (static_cast<int64_t>(positions_.size()) > sizes::kMaxNodes) {
      errorAt(at, fmt::format("the graph has more than {} nodes (the limit)", sizes::kMaxNodes));
    }
  }

  bool is(std::string_view punct) const { return tok_.kind == Tok::Punct && tok_.text == punct; }
  void consume() { tok_ = lex_.next(); }
  void expect(std::string_view punct) {
    if (!is(punct)) errorHere(fmt::format("expected '{}'", punct));
    consume();
  }
  void expectIdent(std::string_view word) {
    if (tok_.kind != Tok::Ident || tok_.text != word) errorHere(fmt::format("expected '{}'", word));
    consume();
  }
  std::string parseName(std::string_view what) {
    if (tok_.kind != Tok::Ident && tok_.kind != Tok::String) errorHere(fmt::format("expected {}", what));
    std::string s = tok_.text;
    consume();
    return s;
  }
  std::string expectValueName() {
    if (tok_.kind != Tok::Value) errorHere("expected a value (%name)");
    std::string s = tok_.text;
    consume();
    return s;
  }
  Value* useValue() {
    Token at = tok_;
    std::string name = expectValueName();
    auto it = values_.find(name);
    if (it == values_.end()) errorAt(at, fmt::format("use of undefined value '%{}'", formatName(name)));
    return it->second;
  }
  void define(const Token& at, const std::string& name) {
    if (values_.count(name)) errorAt(at, fmt::format("value '%{}' is defined twice", formatName(name)));
    values_[name] = nullptr;  // filled in once the node exists
  }

  int64_t parseInt(const Token& t) {
    int64_t v = 0;
    const char* end = t.text.data() + t.text.size();
    const char* begin = t.text.data() + (t.text.size() && t.text[0] == '+' ? 1 : 0);
    auto [p, ec] = std::from_chars(begin, end, v);
    if (ec != std::errc() || p != end) errorAt(t, fmt::format("expected an integer, got '{}'", t.text));
    return v;
  }
  template <typename F>
  F parseFloat(const Token& t) {
    std::string_view s = t.text;
    bool neg = !s.empty() && s[0] == '-';
    std::string_view body = (neg || (!s.empty() && s[0] == '+')) ? s.substr(1) : s;
    if (body == "inf") return neg ? -std::numeric_limits<F>::infinity() : std::numeric_limits<F>::infinity();
    if (body == "nan") return std::numeric_limits<F>::quiet_NaN();
    F v = 0;
    auto [p, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
    if (ec != std::errc() || p != body.data() + body.size()) {
      errorAt(t, fmt::format("expected a number, got '{}'", t.text));
    }
    return neg ? -v : v;
  }
  static bool looksFloat(const Token& t) {
    return t.text.find_first_of(".eEn") != std::string::npos;  // decimal point, exponent, inf or nan
  }
  // Numbers may be written as `inf`/`nan` identifiers too.
  bool atNumber() const {
    return tok_.kind == Tok::Number || (tok_.kind == Tok::Ident && (tok_.text == "inf" || tok_.text == "nan"));
  }

  TensorType parseType() {
    Token at = tok_;
    if (tok_.kind != Tok::Ident) errorHere("expected a tensor type such as f32[batch,17]");
    auto dtype = parseDType(tok_.text);
    if (!dtype) errorAt(at, fmt::format("unknown dtype '{}' (expected f32, f64, i32, i64, u8, i8 or bool)", tok_.text));
    consume();
    TensorType type{*dtype, {}};
    expect("[");
    while (!is("]")) {
      if (tok_.kind == Tok::Ident && tok_.text == "batch") {
        type.shape.push_back(Dim::batch());
        consume();
      } else if (tok_.kind == Tok::Number) {
        int64_t d = parseInt(tok_);
        if (d < 0) errorHere("expected a dimension (a size >= 0 or 'batch')");
        type.shape.push_back(Dim(d));
        consume();
      } else {
        errorHere("expected a dimension (a size >= 0 or 'batch')");
      }
      if (!is("]")) expect(",");
    }
    if (static_cast<int64_t>(type.shape.size()) > sizes::kMaxRank) {
      errorAt(at, fmt::format("{} has {} dimensions (at most {})", type.str(), type.shape.size(), sizes::kMaxRank));
    }
    if (!sizes::numel(evalShape(type.shape, 1))) {
      errorAt(at, fmt::format("{} has more than 2^31-1 elements (the limit of one tensor)", type.str()));
    }
    expect("]");
    return type;
  }

  std::vector<std::string> parseLoc() {
    std::vector<std::string> loc;
    if (!(tok_.kind == Tok::Ident && tok_.text == "loc")) return loc;
    consume();
    expect("(");
    while (!is(")")) {
      if (tok_.kind != Tok::String) errorHere("expected a string in loc(...)");
      loc.push_back(tok_.text);
      consume();
      if (!is(")")) expect(",");
    }
    expect(")");
    return loc;
  }

  // A param's data, from the sidecar or inline. Nothing is allocated for it before the bytes or
  // values actually present are known to match its type (a hostile type cannot allocate).
  Tensor parseParamData(const Token& at, const TensorType& type) {
    if (!isStaticShape(type.shape)) errorAt(at, "a param's shape cannot contain 'batch'");
    std::vector<int64_t> dims = evalShape(type.shape, 0);
    const int64_t numel = staticNumel(dims);  // parseType checked the limits
    const size_t nbytes = static_cast<size_t>(numel) * dtypeSize(type.dtype);
    weightBytes_ += nbytes;
    if (weightBytes_ > static_cast<size_t>(sizes::kMaxWeightBytes)) errorAt(at, "the graph's params hold more than 8 GiB (the limit)");
    if (is("@")) {
      consume();
      Token offTok = tok_;
      if (tok_.kind != Tok::Number) errorHere("expected a byte offset after '@'");
      int64_t offset = parseInt(tok_);
      consume();
      if (sidecar_.empty()) errorAt(offTok, "the param refers to a sidecar file (@offset) but none was found");
      if (offset < 0 || static_cast<uint64_t>(offset) > sidecar_.size() || nbytes > sidecar_.size() - static_cast<uint64_t>(offset)) {
        errorAt(offTok, fmt::format("sidecar range @{} + {} bytes is outside the sidecar ({} bytes)", offset, nbytes,
                                    sidecar_.size()));
      }
      return Tensor::fromBytes(type.dtype, dims, sidecar_.data() + offset, nbytes);
    }
    expect("[");
    // Values are collected as they are read (bounded by the text), then checked against the type.
    std::vector<unsigned char> bytes;
    Tensor one(type.dtype, {1});
    int64_t i = 0;
    while (!is("]")) {
      if (!atNumber()) errorHere("expected a number");
      if (i >= numel) errorHere(fmt::format("more than the {} values of {}", numel, type.str()));
      switch (type.dtype) {
        case DType::F32: one.data<float>()[0] = parseFloat<float>(tok_); break;
        case DType::F64: one.data<double>()[0] = parseFloat<double>(tok_); break;
        default: {
          int64_t v = parseInt(tok_);
          one.setAsDouble(0, static_cast<double>(v));
          if (type.dtype != DType::I64 && one.getAsInt(0) != v) {
            errorHere(fmt::format("{} does not fit in {}", v, dtypeName(type.dtype)));
          }
          if (type.dtype == DType::I64) one.data<int64_t>()[0] = v;
        }
      }
      const auto* b = reinterpret_cast<const unsigned char*>(one.bytes());
      bytes.insert(bytes.end(), b, b + one.nbytes());
      consume();
      ++i;
      if (!is("]")) expect(",");
    }
    if (i != numel) errorHere(fmt::format("expected {} values for {}, got {}", numel, type.str(), i));
    expect("]");
    return Tensor::fromBytes(type.dtype, dims, bytes.data(), bytes.size());
  }

  AttrValue parseAttrValue() {
    if (tok_.kind == Tok::String) {
      std::string s = tok_.text;
      consume();
      return s;
    }
    if (atNumber()) {
      Token t = tok_;
      consume();
      if (looksFloat(t)) return parseFloat<double>(t);
      return parseInt(t);
    }
    if (!is("[")) errorHere("expected an attribute value (number, string or list)");
    consume();
    std::vector<Token> items;
    while (!is("]")) {
      if (!atNumber()) errorHere("expected a number in the list");
      items.push_back(tok_);
      consume();
      if (!is("]")) expect(",");
    }
    consume();
    bool anyFloat = false;
    for (const Token& t : items) anyFloat = anyFloat || looksFloat(t);
    if (anyFloat || items.empty()) {
      std::vector<double> v;
      for (const Token& t : items) v.push_back(parseFloat<double>(t));
      return v;
    }
    std::vector<int64_t> v;
    for (const Token& t : items) v.push_back(parseInt(t));
    return v;
  }

  void parseStatement() {
    std::vector<std::pair<Token, std::string>> results;
    do {
      if (!results.empty()) expect(",");
      Token at = tok_;
      results.emplace_back(at, expectValueName());
    } while (is(","));
    expect("=");
    for (auto& [at, name] : results) define(at, name);
    Token opTok = tok_;
    if (tok_.kind != Tok::Ident) errorHere("expected 'param' or an operator name");
    std::string opName = tok_.text;
    consume();
    if (opName == "param") {
      if (results.size() != 1) errorAt(opTok, "a param defines exactly one value");
      Token typeTok = tok_;
      TensorType type = parseType();
      Tensor data = parseParamData(typeTok, type);
      std::vector<std::string> loc = parseLoc();
      values_[results[0].second] = graph_->addParam(results[0].second, std::move(data), std::move(loc));
      values_[results[0].second]->producer()->setModelWeight(true);  // a .pir param is the model's own
      placed(values_[results[0].second]->producer(), results[0].first);
      return;
    }
    const OpInfo* info = findOp(opName);
    if (!info) errorAt(opTok, fmt::format("unknown operator '{}'", opName));
    expect("(");
    std::vector<Value*> operands;
    while (!is(")")) {
      operands.push_back(useValue());
      if (!is(")")) expect(",");
    }
    expect(")");
    AttrMap attrs;
    if (is("{")) {
      consume();
      while (!is("}")) {
        Token nameTok = tok_;
        if (tok_.kind != Tok::Ident) errorHere("expected an attribute name");
        std::string attrName = tok_.text;
        consume();
        expect("=");
        if (!attrs.emplace(attrName, parseAttrValue()).second) {
          errorAt(nameTok, fmt::format("attribute '{}' is given twice", attrName));
        }
        if (!is("}")) expect(",");
      }
      consume();
    }
    expect(":");
    std::vector<TensorType> types;
    do {
      if (!types.empty()) expect(",");
      types.push_back(parseType());
    } while (is(","));
    if (types.size() != results.size()) {
      errorAt(opTok, fmt::format("{} values defined but {} types given", results.size(), types.size()));
    }
    std::vector<std::string> loc = parseLoc();
    std::vector<std::string> names;
    for (auto& r : results) names.push_back(r.second);
    Node* node = nullptr;
    try {
      node = graph_->addOp(info->op, std::move(operands), std::move(attrs), names, std::move(types), std::move(loc));
    } catch (const Error& e) {
      errorAt(opTok, e.what());
    }
    for (size_t i = 0; i < results.size(); ++i) values_[results[i].second] = node->output(i);
    placed(node, opTok);
  }

  void parseReturn() {
    Token returnTok = tok_;
    expectIdent("return");
    expect("(");
    std::vector<std::pair<std::string, Value*>> outputs;
    while (!is(")")) {
      std::string name = parseName("an output name");
      expect("=");
      outputs.emplace_back(name, useValue());
      if (!is(")")) expect(",");
    }
    expect(")");
    try {
      graph_->setOutputs(std::move(outputs));
    } catch (const Error& e) {
      errorAt(returnTok, e.what());
    }
    placed(graph_->nodes().back().get(), returnTok);
  }

  Lexer lex_;
  std::span<const std::byte> sidecar_;
  Token tok_;
  std::unique_ptr<Graph> graph_;
  std::unordered_map<std::string, Value*> values_;
  std::unordered_map<const Node*, std::pair<int, int>> positions_;  // each node's statement: line, column
  size_t weightBytes_ = 0;
};

// The largest .pir text the parser reads (weights belong in the sidecar): line and column numbers
// stay ints.
constexpr size_t kMaxPirText = size_t{1} << 30;

// The largest sidecar: the weights' limit and the 64-byte alignment of up to 2^20 params.
constexpr size_t kMaxSidecar = static_cast<size_t>(sizes::kMaxWeightBytes) + (size_t{64} << 20);

// The bytes of a regular file of at most maxBytes (a FIFO or a device is refused: it could block
// or never end; a larger file is refused before anything is read).
std::vector<std::byte> readBytes(const std::string& path, bool& exists, size_t maxBytes) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  exists = !ec && std::filesystem::exists(status);
  if (!exists) return {};
  if (!std::filesystem::is_regular_file(status)) fail("cannot read '{}': not a regular file", escape::message(path));
  std::ifstream f(path, std::ios::binary);
  exists = static_cast<bool>(f);
  if (!f) return {};
  f.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(std::max<std::streamoff>(0, f.tellg()));
  f.seekg(0);
  if (size > maxBytes) fail("'{}' is {} bytes, more than the {} a .pir reader accepts", escape::message(path), size, maxBytes);
  std::vector<std::byte> bytes(size);
  f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!f) fail("cannot read '{}'", escape::message(path));
  return bytes;
}

}  // namespace

std::unique_ptr<Graph> parseGraph(std::string_view text, std::string_view sourceName, std::span<const std::byte> sidecar) {
  if (text.size() > kMaxPirText) fail("{}: the .pir text is {} bytes (at most 1 GiB; weights belong in the sidecar)", sourceName, text.size());
  return Parser(text, sourceName, sidecar).parse();
}

std::unique_ptr<Graph> readPir(const std::string& path) {
  bool exists = false;
  std::vector<std::byte> textBytes = readBytes(path, exists, kMaxPirText);
  if (!exists) fail("cannot read '{}': no such file or not readable", path);
  std::string_view text(reinterpret_cast<const char*>(textBytes.data()), textBytes.size());
  bool sidecarExists = false;
  std::vector<std::byte> sidecar = readBytes(path + ".bin", sidecarExists, kMaxSidecar);
  return parseGraph(text, path, sidecar);
}

}  // namespace policyc::ir
