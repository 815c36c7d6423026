// Hostile models and inputs (docs/security.md): names made of every byte reach generated code,
// file names and messages only escaped; sizes are checked before anything is allocated; every
// backend agrees on integer overflow, division by zero and out-of-range indices; damaged .so
// files and cache entries are refused or rebuilt; every failure is one clean error and leaves no
// temporary files.
#include <onnx/onnx_pb.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "policyc/driver/model_io.h"
#include "policyc/debug/check.h"
#include "policyc/driver/compile.h"
#include "policyc/frontend/onnx_import.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/ir/verifier.h"
#include "policyc/runtime/loader.h"
#include "policyc/runtime/npy.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"
#include "policyc/support/sizes.h"
#include "support/cli.h"
#include "support/scratch_dir.h"
#include "support/fixtures.h"

using namespace policyc;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path& scratch() { return testing::scratchDir("policyc-hostile-test"); }

std::string write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// Printable ASCII, plus newlines where `newlines`.
bool plainAscii(const std::string& text, bool newlines) {
  for (unsigned char c : text) {
    if (!((c >= 0x20 && c < 0x7f) || (newlines && c == '\n'))) return false;
  }
  return true;
}

// `policyc ARGS` with a private TMPDIR and extra environment; also the child's peak memory.
struct Child {
  int exitCode = -1;
  int signal = 0;
  std::string out, err;
  long maxRssKb = 0;
};
Child runPolicyc(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  fs::path out = scratch() / "child.out", err = scratch() / "child.err";
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    FILE* o = std::freopen(out.c_str(), "w", stdout);
    FILE* e = std::freopen(err.c_str(), "w", stderr);
    (void)o;
    (void)e;
    for (const std::string& kv : env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv{const_cast<char*>(POLICYC_CLI)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(POLICYC_CLI, argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  REQUIRE(wait4(pid, &status, 0, &usage) == pid);
  Child c;
  c.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  c.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  c.out = testing::slurp(out);
  c.err = testing::slurp(err);
  c.maxRssKb = usage.ru_maxrss;
  return c;
}

// One clean error: exit 2, one "policyc: error:" line of plain ASCII containing `text`.
void requireOneLineError(const Child& c, const std::string& text) {
  INFO("stderr: " << c.err << "\nstdout: " << c.out);
  CHECK(c.signal == 0);
  CHECK(c.exitCode == 2);
  CHECK(c.err.rfind("policyc: error: ", 0) == 0);
  CHECK(std::count(c.err.begin(), c.err.end(), '\n') == 1);
  CHECK(plainAscii(c.err.substr(0, c.err.size() - 1), false));
  CHECK(c.err.find(text) != std::string::npos);
  CHECK(c.err.find("std::") == std::string::npos);
  CHECK(c.err.find("internal") == std::string::npos);
}

// A minimal ONNX model builder (opset 13).
struct Onnx {
  onnx::ModelProto model;
  Onnx() {
    model.set_ir_version(8);
    auto* imp = model.add_opset_import();
    imp->set_domain("");
    imp->set_version(13);
    model.mutable_graph()->set_name("hostile");
  }
  onnx::GraphProto& g() { return *model.mutable_graph(); }
  void input(const std::string& name, std::vector<int64_t> dims, int type = onnx::TensorProto::FLOAT) {
    auto* t = g().add_input()->mutable_type()->mutable_tensor_type();
    g().mutable_input(g().input_size() - 1)->set_name(name);
    t->set_elem_type(type);
    for (int64_t d : dims) {
      if (d < 0) {
        t->mutable_shape()->add_dim()->set_dim_param("batch");
      } else {
        t->mutable_shape()->add_dim()->set_dim_value(d);
      }
    }
  }
  void output(const std::string& name) { g().add_output()->set_name(name); }
  onnx::NodeProto& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs, const std::string& name = "") {
    onnx::NodeProto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return *n;
  }
  static void ints(onnx::NodeProto& n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  std::string save(const std::string& file) {
    std::string bytes;
    REQUIRE(model.SerializeToString(&bytes));
    return write(scratch() / file, bytes);
  }
};

ir::TensorType f32(std::vector<ir::Dim> dims) { return {ir::DType::F32, std::move(dims)}; }

runtime::Model compileAndLoad(const ir::Graph& graph, const std::string& backend, const fs::path& debugDir) {
  driver::CompileRequest r;
  r.backend = codegen::parseBackend(backend);
  r.jit = backend == "llvm";
  r.output = (scratch() / fmt::format("{}-{}.so", debugDir.filename().string(), backend)).string();
  r.cpp.name = "model";
  r.debugDir = debugDir.string();
  r.progress = false;
  return driver::loadCompiled(driver::compileGraph(graph, r));
}

std::vector<ir::Tensor> randomInputs(const ir::Graph& graph, int64_t batch) { return driver::randomInputs(graph, batch, 7); }

}  // namespace

// ---- one escaping rule per context

TEST_CASE("escape: every rule maps every byte to text its context cannot misread", "[hostile][escape]") {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const std::string message = escape::message(all);
  CHECK(plainAscii(message, false));
  CHECK(escape::message(message) == message);  // idempotent
  const std::string comment = escape::cComment(all + "*/?\?/\\");
  CHECK(plainAscii(comment, false));
  CHECK(comment.find("*/") == std::string::npos);
  CHECK(comment.find('\\') != std::string::npos);  // only as the start of \xNN
  for (size_t at = comment.find('\\'); at != std::string::npos; at = comment.find('\\', at + 1)) CHECK(comment[at + 1] == 'x');
  CHECK(comment.find('?') == std::string::npos);
  const std::string literal = escape::cString(all);
  CHECK(plainAscii(literal, false));
  for (size_t at = 0; at < literal.size(); ++at) {
    if (literal[at] == '"') FAIL("an unescaped quote in a C string literal");
    if (literal[at] == '\\') {  // always a three-digit octal escape
      CHECK(std::isdigit(static_cast<unsigned char>(literal[at + 1])));
      CHECK(std::isdigit(static_cast<unsigned char>(literal[at + 3])));
      at += 3;
    }
  }
  const std::string ident = escape::cIdentifier(all);
  CHECK(!ident.empty());
  CHECK(!std::isdigit(static_cast<unsigned char>(ident[0])));
  for (char c : ident) CHECK((std::isalnum(static_cast<unsigned char>(c)) || c == '_'));
  CHECK(plainAscii(escape::printable(all), false));
  CHECK(escape::printable(all).find('"') == std::string::npos);
}

TEST_CASE("escape: file names never leave their directory and read back", "[hostile][escape][files]") {
  for (std::string name : {std::string(""), std::string("."), std::string(".."), std::string("../x"), std::string("/etc/passwd"),
                           std::string("a/b"), std::string(".hidden"), std::string("ok_name-1.2"), std::string("%41"),
                           std::string("\r\n\t"), std::string("\xff\xfe")}) {
    const std::string file = escape::fileName(name);
    INFO("name: " << escape::message(name) << " -> " << file);
    CHECK(!file.empty());
    CHECK(file != ".");
    CHECK(file != "..");
    CHECK(file.find('/') == std::string::npos);
    CHECK(file[0] != '.');
    CHECK(plainAscii(file, false));
    REQUIRE(escape::fileNameToText(file).has_value());
    CHECK(*escape::fileNameToText(file) == name);
  }
  for (int c = 0; c < 256; ++c) {
    std::string name(1, static_cast<char>(c));
    CHECK(escape::fileNameToText(escape::fileName(name)) == name);
  }
  // Distinct names give distinct files; an over-long one is cut and hashed, within NAME_MAX.
  CHECK(escape::fileName("a/b") != escape::fileName("a_b"));
  const std::string longName(5000, '/');
  CHECK(escape::fileName(longName).size() <= 200);
  CHECK(escape::fileName(longName) != escape::fileName(longName + "x"));
  CHECK(files::confined("out", "../../x", ".npy") == fs::path("out") / "%2e.%2f..%2fx.npy");
}

// A graph whose every name holds bytes 1..255 and the strings that end a comment, a string literal
// or a line: the generated code must compile and compute exactly what the graph says.
TEST_CASE("hostile names: every byte in every name compiles to code that does only what the graph says", "[hostile][escape]") {
  const fs::path marker = scratch() / "PWNED";
  const std::string payload = "\rstatic int pwned = std::system(\"touch " + marker.string() + "\");\r//\n*/\"\\?\?/\\";
  ir::Graph g("g\r" + payload);
  ir::Value* x = g.addInput("obs\n" + payload, f32({ir::Dim::batch(), 8}));
  ir::Value* bias = g.addParam("bias" + payload, ir::Tensor::fromVector<float>(ir::DType::F32, {8}, std::vector<float>(8, 0.25f)),
                               {"loc" + payload});
  ir::Value* v = g.addOp(ir::Op::Add, {x, bias}, {}, std::vector<std::string>{"add" + payload}, {}, {payload})->output();
  for (int c = 1; c < 256; ++c) {
    std::string name = fmt::format("n{}", c) + static_cast<char>(c) + payload;
    ir::Op op = c % 3 == 0 ? ir::Op::Tanh : ir::Op::Relu;
    v = g.addOp(op, {v}, {}, std::vector<std::string>{name}, {}, {payload + static_cast<char>(c), "\x7f\x80\xff"})->output();
  }
  std::string bytes;
  for (int c = 1; c < 256; ++c) bytes += static_cast<char>(c);
  ir::Value* half = g.addOp(ir::Op::Relu, {x}, {}, std::vector<std::string>{"r" + bytes}, {}, {bytes})->output();
  g.setOutputs({{"out" + bytes, v}, {"../" + payload, half}});
  ir::verify(g);

  // The .pir text keeps every name, in plain ASCII.
  ir::PrintedGraph printed = ir::printGraph(g);
  CHECK(plainAscii(printed.text, true));
  auto reparsed = ir::parseGraph(printed.text, "hostile.pir", printed.sidecar);
  CHECK(ir::printGraph(*reparsed).text == printed.text);
  CHECK(reparsed->outputs()[1].first == "../" + payload);

  const std::vector<ir::Tensor> inputs = randomInputs(g, 3);
  const std::vector<ir::Tensor> want = ir::interpret(g, inputs);
  for (const char* backend : {"cpp", "llvm"}) {
    DYNAMIC_SECTION("backend " << backend) {
      const fs::path dir = scratch() / fmt::format("names-{}", backend);
      runtime::Model model = compileAndLoad(g, backend, dir);
      std::vector<ir::Tensor> got = driver::runModel(model, inputs, 2);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        driver::TensorCheck c = driver::compareTensors("out", got[i], want[i], 1e-5, 1e-5);
        CHECK(c.pass);
      }
      CHECK(!fs::exists(marker));
      // The descriptor carries the names as they are.
      CHECK(model.outputs()[1].name == "../" + payload);
      CHECK(model.inputs()[0].name == "obs\n" + payload);
      const std::string code = testing::slurp(dir / (std::string(backend) == "cpp" ? "output_code.cpp" : "module.ll"));
      REQUIRE(!code.empty());
      CHECK(plainAscii(code, true));
    }
  }
  // The C header is C, whatever the names.
  driver::CompileRequest r;
  r.backend = codegen::Backend::Cpp;
  r.output = (scratch() / "names-header.so").string();
  r.header = (scratch() / "names.h").string();
  r.cpp.name = "model";
  driver::compileGraph(g, r);
  const std::string header = testing::slurp(r.header);
  CHECK(plainAscii(header, true));
  write(scratch() / "use_header.c", "#include \"" + r.header + "\"\nint main(void) { return 0; }\n");
  CHECK(std::system(("cc -std=c99 -Wall -Werror -fsyntax-only -I " + std::string(POLICYC_SOURCE_DIR) + "/runtime/include " +
                     (scratch() / "use_header.c").string())
                        .c_str()) == 0);
  CHECK(!fs::exists(marker));
}

TEST_CASE("hostile names: the ONNX node name that injected code is a comment now", "[hostile][escape]") {
  const fs::path marker = scratch() / "PWNED_ONNX";
  Onnx m;
  m.input("obs", {-1, 4});
  m.node("Relu", {"obs"}, {"y"}, "relu\rstatic int x = std::system(\"touch " + marker.string() + "\");\r//");
  m.output("y");
  const std::string model = m.save("inject.onnx");
  for (const char* backend : {"cpp", "llvm"}) {
    Child c = runPolicyc({"check", model, "--backend", backend}, {"POLICYC_CACHE_DIR=" + (scratch() / "cache-inject").string()});
    INFO(c.out << c.err);
    CHECK(c.exitCode == 0);
    CHECK(!fs::exists(marker));
  }
  CHECK_THROWS_WITH(
      [] {
        ir::Graph g("nul");
        ir::Value* x = g.addInput("obs", f32({ir::Dim::batch(), 2}));
        g.setOutputs({{std::string("y\0z", 3), x}});
        ir::verify(g);
      }(),
      Contains("contains a NUL byte"));
}

TEST_CASE("hostile names: names that are C keywords, types, macros or policyc's own make distinct identifiers", "[hostile][escape]") {
  ir::Graph g("pc");
  std::vector<ir::Value*> ins;
  for (const char* name : {"pc_run", "int64_t", "NULL", "a", "A", "batch", "policyc_model_descriptor", "_Bool", "__x", "try"}) {
    ins.push_back(g.addInput(name, f32({ir::Dim::batch(), 2})));
  }
  std::vector<std::pair<std::string, ir::Value*>> outs;
  for (size_t i = 0; i < ins.size(); ++i) {
    outs.emplace_back(i % 2 ? "POLICYC_OK" + std::to_string(i) : "pc_max_batch" + std::to_string(i),
                      g.addOp(ir::Op::Relu, {ins[i]}, {}, fmt::format("r{}", i))->output());
  }
  g.setOutputs(outs);
  for (const char* modelName : {"pc", "policyc_model", "int"}) {
    driver::CompileRequest r;
    r.backend = codegen::Backend::Cpp;
    r.output = (scratch() / fmt::format("keywords-{}.so", modelName)).string();
    r.header = (scratch() / fmt::format("keywords-{}.h", modelName)).string();
    r.cpp.name = modelName;
    INFO("model name " << modelName);
    REQUIRE_NOTHROW(driver::compileGraph(g, r));
    runtime::Model m = runtime::Model::load(r.output);
    CHECK(m.inputs()[0].name == "pc_run");
    write(scratch() / "use_keywords.c", "#include \"" + r.header + "\"\nint main(void) { return 0; }\n");
    CHECK(std::system(("cc -std=c99 -Wall -Werror -fsyntax-only -I " + std::string(POLICYC_SOURCE_DIR) + "/runtime/include " +
                       (scratch() / "use_keywords.c").string())
                          .c_str()) == 0);
    r.backend = codegen::Backend::Llvm;
    r.output = (scratch() / fmt::format("keywords-{}-llvm.so", modelName)).string();
    REQUIRE_NOTHROW(driver::compileGraph(g, r));
  }
}

// ---- files confined to the directory the user named

TEST_CASE("output files: model-provided names cannot write outside --output-dir", "[hostile][files]") {
  const fs::path root = scratch() / "confined";
  fs::create_directories(root);
  const std::string abs = (root / "absolute.npy").string();
  const std::string pir = write(root / "escape.pir",
                                "graph escape(%obs: f32[batch,2]) {\n"
                                "  %a = relu(%obs) : f32[batch,2]\n"
                                "  %b = neg(%obs) : f32[batch,2]\n"
                                "  %c = abs(%obs) : f32[batch,2]\n"
                                "  %d = tanh(%obs) : f32[batch,2]\n"
                                "  return (\"../up\"=%a, \"" + abs + "\"=%b, \"..\"=%c, \"sub/dir\"=%d)\n}\n");
  const fs::path out = root / "out";
  for (const char* backend : {"interp", "llvm", "cpp"}) {
    DYNAMIC_SECTION("backend " << backend) {
      fs::remove_all(out);
      Child c = runPolicyc({"run", pir, "--random", "--backend", backend, "--output-dir", out.string()},
                           {"POLICYC_CACHE_DIR=" + (root / "cache").string()});
      INFO(c.err);
      REQUIRE(c.exitCode == 0);
      CHECK(!fs::exists(root / "up.npy"));
      CHECK(!fs::exists(abs));
      std::set<std::string> written;
      for (const auto& e : fs::directory_iterator(out)) written.insert(e.path().filename().string());
      CHECK(written == std::set<std::string>{"%2e.%2fup.npy", escape::fileName(abs) + ".npy", "%2e..npy", "sub%2fdir.npy"});
      for (const std::string& f : written) CHECK(escape::fileNameToText(f.substr(0, f.size() - 4)).has_value());
    }
  }
  SECTION("the debug directory POLICYC_DEBUG=1 picks is named safely too") {
    const std::string evil = write(root / "evil.pir",
                                   "graph \"../../evil\"(%obs: f32[batch,2]) {\n  %a = relu(%obs) : f32[batch,2]\n  return (a=%a)\n}\n");
    const fs::path cwd = fs::current_path();
    fs::create_directories(root / "work");
    fs::current_path(root / "work");
    Child c = runPolicyc({"compile", evil, "-o", (root / "evil.so").string()}, {"POLICYC_DEBUG=1"});
    fs::current_path(cwd);
    INFO(c.err);
    CHECK(c.exitCode == 0);
    CHECK(!fs::exists(root / "evil-nohash"));
    REQUIRE(fs::exists(root / "work" / "policyc_debug"));
    for (const auto& e : fs::directory_iterator(root / "work" / "policyc_debug")) {
      CHECK(e.path().filename().string().rfind("%2e.%2f..%2fevil-", 0) == 0);
    }
  }
}

// ---- sizes checked before anything is allocated

TEST_CASE("sizes: .pir types and params over the limits are errors at their place in the file", "[hostile][sizes]") {
  auto parse = [](const std::string& text) { return ir::parseGraph(text, "bad.pir"); };
  CHECK_THROWS_WITH(parse("graph g(%x: f32[batch,4]) {\n  %w = param f32[4611686018427387905] [1.5, 2.5]\n  return (y=%x)\n}\n"),
                    Contains("bad.pir:2:") && Contains("more than 2^31-1 elements"));
  CHECK_THROWS_WITH(parse("graph g(%x: f32[batch,4]) {\n  %w = param f32[4294967296,4294967296] @0\n  return (y=%x)\n}\n"),
                    Contains("bad.pir:2:") && Contains("more than 2^31-1 elements"));
  CHECK_THROWS_WITH(parse("graph g(%x: f32[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]) {\n  return (y=%x)\n}\n"),
                    Contains("bad.pir:1:") && Contains("17 dimensions"));
  // The largest allowed param with one value: refused once the values run out, nothing allocated.
  CHECK_THROWS_WITH(parse("graph g(%x: f32[batch,4]) {\n  %w = param f32[2147483647] [1.5]\n  return (y=%x)\n}\n"),
                    Contains("bad.pir:2:") && Contains("expected 2147483647 values"));
  std::vector<std::byte> sidecar(64);
  CHECK_THROWS_WITH(ir::parseGraph("graph g(%x: f32[batch,4]) {\n  %w = param f32[4] @9223372036854775800\n  return (y=%x)\n}\n", "bad.pir",
                                   sidecar),
                    Contains("bad.pir:2:") && Contains("outside the sidecar"));
  // The verifier's complaint points at the node's own line (and names the file).
  CHECK_THROWS_WITH(parse("graph g(%x: f32[batch,4]) {\n  %a = relu(%x) : f32[batch,4]\n\n  %b = relu(%a) : f32[batch,4]\n"
                          "  return (y=%a, y=%b)\n}\n"),
                    Contains("bad.pir:5:"));
}

TEST_CASE("sizes: hostile ONNX sizes are errors before any large allocation", "[hostile][sizes]") {
  SECTION("an f64[2^31-1] initializer without data (a 70-byte file)") {
    Onnx m;
    m.input("obs", {-1, 4});
    auto* t = m.g().add_initializer();
    t->set_name("w");
    t->set_data_type(onnx::TensorProto::DOUBLE);
    t->add_dims(2147483647);
    m.node("Relu", {"obs"}, {"y"});
    m.output("y");
    Child c = runPolicyc({"dump", m.save("big_init.onnx")});
    requireOneLineError(c, "has 0 values in double_data but its dims hold 2147483647 elements");
    CHECK(c.maxRssKb < 400 * 1024);
  }
  for (const char* op : {"MaxPool", "AveragePool", "Conv"}) {
    DYNAMIC_SECTION(op << " with pads of 2^62") {
      Onnx m;
      m.input("obs", {-1, 1, 4, 4});
      std::vector<std::string> ins{"obs"};
      if (std::string(op) == "Conv") {
        auto* w = m.g().add_initializer();
        w->set_name("w");
        w->set_data_type(onnx::TensorProto::FLOAT);
        for (int64_t d : {1, 1, 2, 2}) w->add_dims(d);
        for (int i = 0; i < 4; ++i) w->add_float_data(1.0f);
        ins.push_back("w");
      }
      onnx::NodeProto& n = m.node(op, ins, {"y"});
      Onnx::ints(n, "kernel_shape", {2, 2});
      Onnx::ints(n, "pads", {int64_t{1} << 62, 0, int64_t{1} << 62, 0});
      m.output("y");
      requireOneLineError(runPolicyc({"run", m.save(std::string(op) + "_pads.onnx"), "--random"}), "pads must be at most 2^31-1");
    }
  }
  SECTION("Pad with pads of 2^62") {
    Onnx m;
    m.input("obs", {-1, 4});
    auto* p = m.g().add_initializer();
    p->set_name("pads");
    p->set_data_type(onnx::TensorProto::INT64);
    p->add_dims(4);
    for (int64_t v : {int64_t{0}, int64_t{1} << 62, int64_t{0}, int64_t{1} << 62}) p->add_int64_data(v);
    m.node("Pad", {"obs", "pads"}, {"y"});
    m.output("y");
    requireOneLineError(runPolicyc({"run", m.save("pad_huge.onnx"), "--random"}), "must be within +-(2^31-1)");
  }
}

TEST_CASE("sizes: .npy headers and batch sizes are checked", "[hostile][sizes]") {
  auto npy = [](const std::string& file, const std::string& header) {
    std::string h = header;
    h.append(64 - (10 + h.size() + 1) % 64, ' ');
    h += '\n';
    std::string bytes("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(h.size() & 0xff);
    bytes += static_cast<char>(h.size() >> 8);
    return write(scratch() / file, bytes + h + std::string(16, '\0'));
  };
  CHECK_THROWS_WITH(runtime::readNpy(npy("wrap.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387905, 4), }")),
                    Contains("more than 2^31-1 elements"));
  CHECK_THROWS_WITH(runtime::readNpy(npy("bad_dim.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1x, 17), }")),
                    Contains("malformed shape '(1x, 17)'"));
  CHECK_THROWS_WITH(runtime::readNpy(npy("neg.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 4), }")),
                    Contains("malformed shape"));
  CHECK_THROWS_WITH(runtime::readNpy(npy("rank.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1), }")),
                    Contains("more than 16 dimensions"));
  CHECK_THROWS_WITH(runtime::readNpy(npy("twocommas.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,2), }")),
                    Contains("malformed shape"));
  CHECK(runtime::readNpy(npy("ok.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }")).shape == std::vector<int64_t>{2, 2});
  CHECK(runtime::readNpy(npy("one.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }")).shape == std::vector<int64_t>{4});

  const std::string model = testing::sourcePath("examples/models/ppo_mlp.onnx");
  requireOneLineError(runPolicyc({"run", model, "--random", "--backend", "interp", "--batch", "4611686018427387905"}),
                      "--batch: Value 4611686018427387905 not in range");
  // A FIFO is refused, not read forever.
  const fs::path fifo = scratch() / "obs.fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  requireOneLineError(runPolicyc({"run", model, "--backend", "interp", "--input", "obs=" + fifo.string()}), "not a regular file");

  runtime::Model ppo = compileAndLoad(*driver::loadModel(model), "llvm", scratch() / "ppo-batch");
  CHECK_THROWS_WITH(ppo.workspaceBytes(int64_t{1} << 40), Contains("batch must be between 0 and 2147483647"));
  CHECK(ppo.descriptor().workspace_bytes(int64_t{1} << 40) == SIZE_MAX);
  CHECK(ppo.runUnchecked(nullptr, nullptr, int64_t{1} << 40, nullptr, 1) == POLICYC_ERROR_ARGUMENT);
}

// ---- one semantics for every backend

namespace {

struct IntCase {
  const char* name;
  ir::Op op;
  ir::DType dtype;
  std::vector<double> a, b;  // b empty for unary ops
};

ir::Tensor tensorOf(ir::DType t, const std::vector<double>& values) {
  ir::Tensor x(t, {1, static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) x.setAsDouble(static_cast<int64_t>(i), values[i]);
  return x;
}

}  // namespace

TEST_CASE("semantics: integer overflow saturates alike in interp, cpp and llvm, op by op", "[hostile][semantics]") {
  const double i32max = 2147483647.0, i32min = -2147483648.0, big = 1099511627776.0;  // 2^40
  const std::vector<IntCase> cases = {
      {"add i32", ir::Op::Add, ir::DType::I32, {i32max, i32min, 5, -7}, {1, -1, 3, 2}},
      {"sub i32", ir::Op::Sub, ir::DType::I32, {i32min, i32max, 5, 0}, {1, -1, 9, i32min}},
      {"mul i32", ir::Op::Mul, ir::DType::I32, {65536, -65536, 46341, 3}, {65536, 65536, -46341, -4}},
      {"div i32", ir::Op::Div, ir::DType::I32, {i32min, 7, -7, i32max}, {-1, 2, 2, -1}},
      {"pow i32", ir::Op::Pow, ir::DType::I32, {2, -2, 3, 10}, {31, 31, 5, 10}},
      {"neg i32", ir::Op::Neg, ir::DType::I32, {i32min, i32max, 0, -5}, {}},
      {"abs i32", ir::Op::Abs, ir::DType::I32, {i32min, -1, 0, 7}, {}},
      {"add u8", ir::Op::Add, ir::DType::U8, {200, 255, 1, 0}, {100, 1, 2, 0}},
      {"sub u8", ir::Op::Sub, ir::DType::U8, {3, 0, 200, 255}, {5, 1, 100, 255}},
      {"mul u8", ir::Op::Mul, ir::DType::U8, {16, 255, 3, 0}, {16, 2, 5, 255}},
      {"neg u8", ir::Op::Neg, ir::DType::U8, {0, 1, 200, 255}, {}},
      {"add i8", ir::Op::Add, ir::DType::I8, {127, -128, 100, -100}, {1, -1, 100, -100}},
      {"mul i8", ir::Op::Mul, ir::DType::I8, {-128, 127, 16, -16}, {-1, 2, 8, 8}},
      {"abs i8", ir::Op::Abs, ir::DType::I8, {-128, -127, 0, 5}, {}},
      {"mul i64", ir::Op::Mul, ir::DType::I64, {big, -big, big, 3}, {big, big, -big, 5}},
      {"add i64", ir::Op::Add, ir::DType::I64, {big, -big, 1, 0}, {-1, 1, 2, 0}},
      {"pow i64", ir::Op::Pow, ir::DType::I64, {2, -2, 10, 7}, {70, 71, 18, 2}},
  };
  for (const IntCase& c : cases) {
    DYNAMIC_SECTION(c.name) {
      ir::Graph g("ints");
      ir::Value* a = g.addInput("a", {c.dtype, {ir::Dim::batch(), 4}});
      std::vector<ir::Value*> operands{a};
      std::vector<ir::Tensor> inputs{tensorOf(c.dtype, c.a)};
      if (!c.b.empty()) {
        operands.push_back(g.addInput("b", {c.dtype, {ir::Dim::batch(), 4}}));
        inputs.push_back(tensorOf(c.dtype, c.b));
      }
      g.setOutputs({{"y", g.addOp(c.op, operands, {}, "y")->output()}});
      const std::vector<ir::Tensor> want = ir::interpret(g, inputs);
      for (const char* backend : {"cpp", "llvm"}) {
        runtime::Model model = compileAndLoad(g, backend, scratch() / fmt::format("int-{}-{}", c.name, backend));
        std::vector<ir::Tensor> got = driver::runModel(model, inputs, 1);
        INFO("backend " << backend << ": " << driver::summarize(got[0]) << " vs interp " << driver::summarize(want[0]));
        CHECK(got[0].bitEqual(want[0]));
      }
    }
  }
  SECTION("casts narrow saturating") {
    for (auto [from, to] : {std::pair{ir::DType::I64, ir::DType::I32}, std::pair{ir::DType::I32, ir::DType::U8},
                            std::pair{ir::DType::I32, ir::DType::I8}, std::pair{ir::DType::F32, ir::DType::I32},
                            std::pair{ir::DType::U8, ir::DType::I8}}) {
      ir::Graph g("cast");
      ir::Value* a = g.addInput("a", {from, {ir::Dim::batch(), 4}});
      g.setOutputs({{"y", g.addOp(ir::Op::Cast, {a}, {{"to", std::string(ir::dtypeName(to))}}, "y")->output()}});
      std::vector<ir::Tensor> inputs{tensorOf(from, from == ir::DType::U8 ? std::vector<double>{0, 127, 128, 255}
                                                                           : std::vector<double>{-big, big, -129, 300})};
      const std::vector<ir::Tensor> want = ir::interpret(g, inputs);
      for (const char* backend : {"cpp", "llvm"}) {
        runtime::Model model = compileAndLoad(g, backend, scratch() / fmt::format("cast-{}-{}-{}", ir::dtypeName(from), ir::dtypeName(to), backend));
        INFO(ir::dtypeName(from) << " -> " << ir::dtypeName(to) << " on " << backend);
        CHECK(driver::runModel(model, inputs, 1)[0].bitEqual(want[0]));
      }
    }
  }
}

TEST_CASE("semantics: division by zero and out-of-range gather indices are errors of every backend", "[hostile][semantics]") {
  SECTION("integer division by zero") {
    ir::Graph g("div");
    ir::Value* a = g.addInput("a", {ir::DType::I32, {ir::Dim::batch(), 4}});
    ir::Value* b = g.addInput("b", {ir::DType::I32, {ir::Dim::batch(), 4}});
    g.setOutputs({{"y", g.addOp(ir::Op::Div, {a, b}, {}, "y")->output()}});
    std::vector<ir::Tensor> inputs{tensorOf(ir::DType::I32, {1, 2, 3, 4}), tensorOf(ir::DType::I32, {1, 0, 1, 1})};
    CHECK_THROWS_WITH(ir::interpret(g, inputs), Contains("integer division by zero"));
    for (const char* backend : {"cpp", "llvm"}) {
      runtime::Model model = compileAndLoad(g, backend, scratch() / fmt::format("div0-{}", backend));
      CHECK_THROWS_WITH(driver::runModel(model, inputs, 2), Contains("run returned -5 (an integer division by zero)"));
      inputs[1] = tensorOf(ir::DType::I32, {1, 2, 1, 1});
      CHECK_NOTHROW(driver::runModel(model, inputs, 1));
      inputs[1] = tensorOf(ir::DType::I32, {1, 0, 1, 1});
    }
  }
  for (int64_t rows : {int64_t{0}, int64_t{3}}) {
    DYNAMIC_SECTION("gather from a table of " << rows << " rows") {
      ir::Graph g("gather");
      ir::Value* idx = g.addInput("idx", {ir::DType::I64, {ir::Dim::batch(), 2}});
      ir::Value* table = g.addParam("table", ir::Tensor(ir::DType::F32, {rows, 4}));
      g.setOutputs({{"y", g.addOp(ir::Op::Gather, {table, idx}, {{"axis", int64_t{0}}}, "y")->output()}});
      for (std::vector<double> bad : {std::vector<double>{0, 7}, std::vector<double>{-4, 0}, std::vector<double>{0, 9.2e18}}) {
        std::vector<ir::Tensor> inputs{tensorOf(ir::DType::I64, bad)};
        CHECK_THROWS_WITH(ir::interpret(g, inputs), Contains("out of range"));
        for (const char* backend : {"cpp", "llvm"}) {
          runtime::Model model = compileAndLoad(g, backend, scratch() / fmt::format("gather-{}-{}", rows, backend));
          CHECK_THROWS_WITH(driver::runModel(model, inputs, 1), Contains("run returned -4"));
        }
      }
    }
  }
}

TEST_CASE("semantics: a conv epilogue that divides integers, and both errors in one kernel", "[hostile][semantics]") {
  SECTION("an integer division in a conv's epilogue (never a oneDNN epilogue: oneDNN has no status)") {
    ir::Graph g("convdiv");
    ir::Value* x = g.addInput("x", f32({ir::Dim::batch(), 2, 5, 5}));
    ir::Value* d = g.addInput("d", {ir::DType::I32, {ir::Dim::batch(), 4, 3, 3}});
    ir::Tensor w(ir::DType::F32, {4, 2, 3, 3});
    for (int64_t i = 0; i < w.numel(); ++i) w.setAsDouble(i, 0.25 * static_cast<double>(i % 7));
    ir::Value* c = g.addOp(ir::Op::Conv, {x, g.addParam("w", w)}, {{"kernel_shape", std::vector<int64_t>{3, 3}}}, "c")->output();
    ir::Value* ci = g.addOp(ir::Op::Cast, {c}, {{"to", std::string("i32")}}, "ci")->output();
    ir::Value* q = g.addOp(ir::Op::Div, {ci, d}, {}, "q")->output();
    g.setOutputs({{"y", g.addOp(ir::Op::Cast, {q}, {{"to", std::string("f32")}}, "y")->output()}});
    std::vector<ir::Tensor> inputs = randomInputs(g, 2);
    // Small integers times quarters: every conv sum is exact in f32 and in the interpreter's double.
    for (int64_t i = 0; i < inputs[0].numel(); ++i) inputs[0].setAsDouble(i, static_cast<double>(i % 7) - 3);
    for (int64_t i = 0; i < inputs[1].numel(); ++i) inputs[1].setAsDouble(i, 1 + i % 3);
    const std::vector<ir::Tensor> want = ir::interpret(g, inputs);
    for (const char* backend : {"cpp", "llvm"}) {
      runtime::Model model = compileAndLoad(g, backend, scratch() / fmt::format("convdiv-{}", backend));
      CHECK(driver::runModel(model, inputs, 1)[0].bitEqual(want[0]));
      std::vector<ir::Tensor> zero = inputs;
      zero[1].setAsDouble(5, 0);
      CHECK_THROWS_WITH(driver::runModel(model, zero, 2), Contains("run returned -5"));
    }
  }
  SECTION("a bad gather index and a zero divisor in one kernel: the index error, in every backend") {
    ir::Graph g("both");
    ir::Value* idx = g.addInput("idx", {ir::DType::I64, {ir::Dim::batch(), 2}});
    ir::Value* d = g.addInput("d", {ir::DType::I32, {ir::Dim::batch(), 2, 3}});
    ir::Tensor table(ir::DType::I32, {4, 3});
    ir::Value* t = g.addOp(ir::Op::Gather, {g.addParam("table", table), idx}, {{"axis", int64_t{0}}}, "t")->output();
    g.setOutputs({{"y", g.addOp(ir::Op::Div, {t, d}, {}, "y")->output()}});
    std::vector<ir::Tensor> inputs{tensorOf(ir::DType::I64, {0, 99}), ir::Tensor(ir::DType::I32, {1, 2, 3})};
    CHECK_THROWS_WITH(ir::interpret(g, inputs), Contains("out of range"));
    for (const char* backend : {"cpp", "llvm"}) {
      runtime::Model model = compileAndLoad(g, backend, scratch() / fmt::format("both-{}", backend));
      for (int threads : {1, 2}) CHECK_THROWS_WITH(driver::runModel(model, inputs, threads), Contains("run returned -4"));
    }
  }
}

TEST_CASE("sizes: dims over the limits never reach shape arithmetic", "[hostile][sizes]") {
  CHECK_THROWS_WITH(ir::parseGraph("graph g(%x: f32[0,4611686018427387904]) {\n  return (y=%x)\n}\n", "zero.pir"),
                    Contains("zero.pir:1:") && Contains("more than 2^31-1 elements"));
  Onnx m;
  m.input("obs", {-1, int64_t{1} << 62});
  onnx::NodeProto& n = m.node("Concat", {"obs", "obs"}, {"y"});
  auto* axis = n.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  m.output("y");
  requireOneLineError(runPolicyc({"dump", m.save("wide_input.onnx")}), "graph input 'obs' of type f32[batch,4611686018427387904] is over the limits");
  // Results of shape functions are bounded too: concatenating 2^31-1-wide inputs is an error.
  ir::Graph g("wide");
  ir::Value* a = g.addInput("a", f32({ir::Dim::batch(), sizes::kMaxElements}));
  CHECK_THROWS_WITH(g.addOp(ir::Op::Concat, {a, a}, {{"axis", int64_t{1}}}, "c"), Contains("more than 2^31-1 elements per batch row"));
}

// ---- loading only what is whole

TEST_CASE("shared objects: truncated or foreign files are refused before dlopen, cache entries rebuilt", "[hostile][so]") {
  const std::string model = testing::sourcePath("examples/models/ppo_mlp.onnx");
  const fs::path so = scratch() / "whole.so";
  driver::CompileRequest r;
  r.backend = codegen::Backend::Llvm;
  r.output = so.string();
  r.cpp.name = "ppo";
  driver::compileGraph(*driver::loadModel(model), r);
  const std::string bytes = testing::slurp(so);
  REQUIRE(runtime::Model::load(so.string()).sourceHash().size() == 16);

  SECTION("every truncation is found by the checks") {
    std::vector<std::byte> image(bytes.size());
    std::memcpy(image.data(), bytes.data(), bytes.size());
    CHECK(runtime::sharedObjectProblem(image).empty());
    for (size_t keep : {size_t{0}, size_t{10}, size_t{64}, size_t{200}, size_t{4096}, bytes.size() / 2, bytes.size() - 1}) {
      INFO("kept " << keep << " of " << bytes.size() << " bytes");
      CHECK(!runtime::sharedObjectProblem(std::span<const std::byte>(image.data(), keep)).empty());
    }
    const fs::path cut = scratch() / "truncated.so";
    write(cut, bytes.substr(0, bytes.size() / 2));
    CHECK_THROWS_WITH(runtime::Model::load(cut.string()), Contains("is not a loadable shared object: truncated"));
    requireOneLineError(runPolicyc({"run", cut.string(), "--random"}), "truncated");
  }
  SECTION("a damaged or foreign cache entry is rebuilt") {
    const fs::path cache = scratch() / "so-cache";
    const std::vector<std::string> env{"POLICYC_CACHE_DIR=" + cache.string()};
    Child first = runPolicyc({"run", model, "--backend", "cpp", "--random"}, env);
    REQUIRE(first.exitCode == 0);
    fs::path entry;
    for (const auto& e : fs::directory_iterator(cache)) {
      if (e.path().extension() == ".so") entry = e.path();
    }
    REQUIRE(!entry.empty());
    const std::string good = testing::slurp(entry);
    write(entry, good.substr(0, good.size() / 3));
    Child truncated = runPolicyc({"run", model, "--backend", "cpp", "--random"}, env);
    CHECK(truncated.exitCode == 0);
    CHECK(truncated.err.find("is damaged") != std::string::npos);
    CHECK(truncated.out == first.out);
    // Another model's .so under this key: found by its source hash, rebuilt.
    fs::copy_file(so, entry, fs::copy_options::overwrite_existing);
    Child foreign = runPolicyc({"run", model, "--backend", "cpp", "--random"}, env);
    CHECK(foreign.exitCode == 0);
    CHECK(foreign.err.find("built from something else") != std::string::npos);
    CHECK(foreign.out == first.out);
    Child again = runPolicyc({"run", model, "--backend", "cpp", "--random"}, env);
    CHECK(again.err.find("compiled") == std::string::npos);  // whole and matching: used as it is
  }
}

// ---- every failure one line

TEST_CASE("messages: every failure is one escaped policyc: error: line and exit 2", "[hostile][cli]") {
  requireOneLineError(runPolicyc({"bogus"}), "unknown command 'bogus'");
  requireOneLineError(runPolicyc({}), "a command is required");
  requireOneLineError(runPolicyc({"run", "--bogus-flag", "x.onnx"}), "--bogus-flag");
  requireOneLineError(runPolicyc({"check", testing::sourcePath("examples/models/ppo_mlp.onnx"), "--atol", "nan"}),
                      "--atol: must be a finite number >= 0, got nan");
  requireOneLineError(runPolicyc({"minify", testing::sourcePath("examples/models/ppo_mlp.onnx"), "--failure", "crash", "-o", "x", "--timeout", "inf"}),
                      "--timeout");
  Onnx m;
  m.input("obs", {-1, 4});
  m.node("NoSuchOp", {"obs"}, {"y"}, "bad\nname\x1b[31m");
  m.output("y");
  requireOneLineError(runPolicyc({"dump", m.save("nlname.onnx")}), "node 'bad\\x0aname\\x1b[31m'");
  const std::string verifyError = write(scratch() / "verify.pir",
                                        "graph g(%x: f32[batch,4]) {\n  %a = relu(%x) : f32[batch,4]\n  %b = tanh(%a) : f32[batch,5]\n"
                                        "  return (y=%b)\n}\n");
  requireOneLineError(runPolicyc({"dump", verifyError}), verifyError + ":3:");
  Onnx reduce;
  reduce.input("obs", {-1, 4});
  Onnx::ints(reduce.node("ReduceMax", {"obs"}, {"y"}), "axes", {0});
  reduce.output("y");
  requireOneLineError(runPolicyc({"run", reduce.save("reduce_batch.onnx"), "--random"}), "reduces over the batch dimension");
}

// ---- temporary files removed on every path

TEST_CASE("temporary files: failed builds and crashing models leave nothing behind", "[hostile][temp]") {
  const fs::path tmp = scratch() / "private-tmp";
  fs::create_directories(tmp);
  const std::vector<std::string> env{"TMPDIR=" + tmp.string(), "POLICYC_CACHE_DIR=" + (scratch() / "temp-cache").string()};
  const std::string model = testing::sourcePath("examples/models/ppo_mlp.onnx");
  auto leftovers = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp)) names.push_back(e.path().filename().string());
    return names;
  };
  std::vector<std::string> faultEnv = env;
  faultEnv.push_back("POLICYC_INJECT_FAULT=tanh:compile");
  Child build = runPolicyc({"compile", model, "--backend", "cpp", "-o", (scratch() / "never.so").string()}, faultEnv);
  requireOneLineError(build, "the C++ compiler failed");
  CHECK(!fs::exists(scratch() / "never.so"));
  CHECK(leftovers().empty());
  faultEnv.back() = "POLICYC_INJECT_FAULT=tanh:crash";
  Child check = runPolicyc({"check", model}, faultEnv);
  CHECK(check.exitCode == 1);
  CHECK(check.out.find("the compiled model crashed") != std::string::npos);
  CHECK(leftovers().empty());
  std::vector<std::string> noLinker = env;
  noLinker.push_back("POLICYC_CXX=/bin/false");
  Child link = runPolicyc({"compile", model, "-o", (scratch() / "unlinked.so").string()}, noLinker);
  requireOneLineError(link, "linking");
  CHECK(leftovers().empty());
}
