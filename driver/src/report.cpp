// The debug report (report.h): nodes.json and kernels.json at compile time, then index.html and
// the line-anchored code pages from whatever the debug directory holds.
#include "policyc/driver/report.h"

#include "policyc/driver/debug_dir.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"

namespace policyc::driver {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Model text goes into JSON as printable ASCII (escape::printable: one text per name, so names stay
// apart as keys): the page escapes it again for HTML, and nothing downstream has to handle invalid
// UTF-8 (nlohmann::json would throw on it).
std::string safe(std::string_view text) { return escape::printable(text); }

}  // namespace

std::string nodesJson(const ir::Graph& graph, const std::map<std::string, std::string>& kernelOfNode) {
  json nodes = json::array();
  for (const auto& node : graph.nodes()) {
    const ir::Node& n = *node;
    json j;
    j["name"] = safe(n.name());
    j["kind"] = ir::nodeKindName(n.kind());
    j["op"] = n.isOp() ? std::string(n.info().name) : std::string(ir::nodeKindName(n.kind()));
    std::vector<std::string> types;
    for (size_t o = 0; o < n.numOutputs(); ++o) types.push_back(n.output(o)->type().str());
    j["types"] = types;
    std::vector<std::string> provenance;
    for (const std::string& p : n.provenance()) provenance.push_back(safe(p));
    j["provenance"] = provenance;
    auto it = kernelOfNode.find(n.name());
    j["kernel"] = n.isOp() && it != kernelOfNode.end() ? safe(it->second) : "";
    nodes.push_back(std::move(j));
  }
  return nodes.dump(1) + "\n";
}

std::string kernelsJson(const codegen::KernelProgram& program, const codegen::ImplChoice& dispatch) {
  json kernels = json::array();
  auto buffers = [&](const std::vector<int>& ids) {
    json list = json::array();
    for (int id : ids) {
      const codegen::Buffer& b = program.buffer(id);
      list.push_back({{"name", safe(b.name)}, {"kind", codegen::bufferKindName(b.kind)}, {"type", b.type.str()}});
    }
    return list;
  };
  for (const codegen::Kernel& k : program.kernels) {
    json j;
    j["name"] = safe(k.name);
    j["kind"] = codegen::kernelKindName(k.kind);
    j["domain"] = ir::shapeStr(k.domain);
    std::vector<std::string> nodes;
    for (const ir::Node* n : k.sources) nodes.push_back(safe(n->name()));
    j["nodes"] = nodes;
    j["reads"] = buffers(k.reads());
    j["writes"] = buffers(k.writes());
    codegen::KernelCost cost = codegen::kernelCost(program, k);
    j["flops"] = {cost.flopsStatic, cost.flopsPerRow};
    j["bytes"] = {cost.bytesStatic, cost.bytesPerRow};
    json impl = json::array();
    if (auto it = dispatch.find(k.name); it != dispatch.end()) {
      for (const codegen::ImplRange& r : it->second) impl.push_back({{"max_batch", r.maxBatch}, {"impl", r.impl}});
    }
    j["impl"] = impl;
    kernels.push_back(std::move(j));
  }
  return kernels.dump(1) + "\n";
}

namespace {

// A regular file of the directory, never through a symbolic link (a link could pull any file of
// the machine into the page).
std::optional<std::string> readText(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(p, ec))) return std::nullopt;
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::optional<json> readJson(const fs::path& p) {
  std::optional<std::string> text = readText(p);
  if (!text) return std::nullopt;
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::string h(std::string_view text) { return escape::html(text); }

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Preformatted text: escaped line by line, so that its line breaks stay line breaks.
std::string hLines(const std::string& text) {
  std::string out;
  for (const std::string& line : lines(text)) out += h(line) + "\n";
  return out;
}

std::string str(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}


// Graphviz's SVG inlined, so that the report can link into it. A file with anything that could
// run or load (a script, an event handler, embedded HTML or images, a second document after
// </svg>) is shown through <img> instead; the page's Content-Security-Policy (nothing runs, nothing
// is fetched from elsewhere) is the backstop for what a pattern misses.
std::optional<std::string> inlineSvg(const std::string& svg) {
  static const std::regex active(R"((<\s*script|<\s*foreignObject|<\s*iframe|<\s*style|<\s*image|javascript|\son[a-zA-Z]+\s*=))",
                                  std::regex::icase);
  size_t start = svg.find("<svg");
  size_t end = svg.rfind("</svg>");
  if (start == std::string::npos || end == std::string::npos || end < start) return std::nullopt;
  std::string inner = svg.substr(start, end + 6 - start);
  if (std::regex_search(inner, active)) return std::nullopt;
  return inner;
}

// Where a kernel's code starts in a code file: the C++ backend's "// kernel NAME (" comment, the
// LLVM module's "define ... @NAME(".
std::map<std::string, size_t> kernelLines(const std::vector<std::string>& code, const std::vector<std::string>& kernels) {
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < code.size(); ++i) {
    const std::string& line = code[i];
    const bool cpp = line.rfind("// kernel ", 0) == 0, ll = line.rfind("define ", 0) == 0;
    if (!cpp && !ll) continue;
    for (const std::string& k : kernels) {
      if (at.count(k)) continue;
      if ((cpp && line.rfind("// kernel " + k + " ", 0) == 0) || (ll && line.find("@" + k + "(") != std::string::npos)) at[k] = i + 1;
    }
  }
  return at;
}

constexpr const char* kStyle = R"(
body { font-family: Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-family: monospace; }
pre { background: #f7f7f7; padding: 0.5em; overflow: auto; max-height: 40em; font-size: 0.85em; }
.picture { overflow: auto; max-height: 50em; border: 1px solid #ddd; margin: 0.5em 0; }
.bar { background: #4a90d9; height: 0.9em; display: inline-block; }
.note { color: #777; }
code { font-size: 0.9em; }
)";

struct Page {
  std::string html;
  std::vector<std::pair<std::string, std::string>> sections;  // id, title (for the navigation)
  void section(const std::string& id, const std::string& title) {
    sections.emplace_back(id, title);
    html += fmt::format("<h2 id=\"{}\">{}</h2>\n", id, h(title));
  }
};

std::string bar(double fraction) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  return fmt::format("<span class=\"bar\" style=\"width:{:.1f}em\"></span>", 20.0 * fraction);
}

void addStages(Page& page, const fs::path& dir) {
  std::optional<std::string> times = readText(dir / "compile_times.txt");
  if (!times) return;
  page.section("stages", "Stages and their times");
  std::vector<std::pair<std::string, double>> rows;
  double total = 0;
  for (const std::string& line : lines(*times)) {
    size_t cut = line.find_last_of(' ');
    if (cut == std::string::npos || line.rfind("stage ", 0) == 0) continue;
    std::string name = line.substr(0, cut);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    double ms = std::strtod(line.c_str() + cut + 1, nullptr);
    if (name == "total") {
      total = ms;
    } else {
      rows.emplace_back(name, ms);
    }
  }
  page.html += "<table><tr><th>stage</th><th>ms</th><th></th></tr>\n";
  for (const auto& [name, ms] : rows) {
    page.html += fmt::format("<tr><td>{}</td><td class=\"num\">{:.2f}</td><td>{}</td></tr>\n", h(name), ms, bar(total > 0 ? ms / total : 0));
  }
  page.html += fmt::format("<tr><th>total</th><td class=\"num\">{:.2f}</td><td></td></tr></table>\n", total);
}

void addPasses(Page& page, const fs::path& dir) {
  std::optional<std::string> log = readText(dir / "passes.log");
  if (!log) return;
  page.section("passes", "What each pass changed");
  // passes.log: a "pass NAME: what changed (ms)" line per pass, the graph after it when it changed.
  struct Entry {
    std::string summary, graph;
  };
  std::vector<Entry> entries;
  for (const std::string& line : lines(*log)) {
    if (line.rfind("pass ", 0) == 0) {
      entries.push_back({line.substr(5), ""});
    } else if (!entries.empty()) {
      entries.back().graph += line + "\n";
    }
  }
  page.html += "<table><tr><th>#</th><th>pass: what changed</th><th>graph after it</th></tr>\n";
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    std::string graph = e.graph.find_first_not_of(" \n") == std::string::npos
                            ? "<span class=\"note\">unchanged</span>"
                            : fmt::format("<details><summary>show</summary><pre>{}</pre></details>", hLines(e.graph));
    page.html += fmt::format("<tr><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td></tr>\n", i + 1, h(e.summary), graph);
  }
  page.html += "</table>\n";
}

void addPictures(Page& page, const fs::path& dir) {
  const std::pair<const char*, const char*> pictures[] = {
      {"graph_input", "The graph as given (already optimised)"}, {"graph_imported", "The imported graph"},
      {"graph_optimized", "The optimised graph"}, {"kernels", "The kernels after fusion"}};
  bool any = false;
  for (const auto& [name, title] : pictures) any = any || fs::exists(dir / (std::string(name) + ".dot"));
  if (!any) return;
  page.section("graphs", "Pictures");
  for (const auto& [name, title] : pictures) {
    const std::string base = name;
    if (!fs::exists(dir / (base + ".dot"))) continue;
    page.html += fmt::format("<h3 id=\"picture-{}\">{}</h3>\n", base, h(title));
    std::optional<std::string> svg = readText(dir / (base + ".svg"));
    if (!svg) {
      std::optional<std::string> why = readText(dir / (base + ".svg.txt"));
      page.html += fmt::format("<p class=\"note\">{} <a href=\"{}.dot\">{}.dot</a></p>\n", h(why ? *why : "no picture"), base, base);
      continue;
    }
    page.html += fmt::format("<p><a href=\"{0}.svg\">{0}.svg</a> · <a href=\"{0}.dot\">{0}.dot</a></p>\n", base);
    if (std::optional<std::string> inlined = inlineSvg(*svg)) {
      page.html += "<div class=\"picture\">" + *inlined + "</div>\n";
    } else {
      page.html += fmt::format("<div class=\"picture\"><img src=\"{}.svg\" alt=\"{}\"></div>\n", base, h(title));
    }
  }
}

struct CodeFile {
  std::string name;  // output_code.cpp, module.ll, module.opt.ll
  std::string page;  // code_NAME.html
  std::map<std::string, size_t> kernelLine;
};

// Writes code_NAME.html for each code file: one anchor per line (#L12).
std::vector<CodeFile> writeCodePages(const fs::path& dir, const std::vector<std::string>& kernels) {
  std::vector<CodeFile> files;
  for (const char* name : {"output_code.cpp", "module.ll", "module.opt.ll"}) {
    std::optional<std::string> text = readText(dir / name);
    if (!text) continue;
    CodeFile f{name, fmt::format("code_{}.html", name), {}};
    recordDebugFiles(dir, {f.page});
    std::vector<std::string> code = lines(*text);
    f.kernelLine = kernelLines(code, kernels);
    std::string html = fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                                   "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
                                   "<title>{}</title><style>"
                                   "body{{margin:0}} pre{{margin:0;font-size:0.85em}} a.n{{color:#999;display:inline-block;width:5em;"
                                   "text-align:right;margin-right:1em;text-decoration:none}} span:target{{background:#ffec99}}</style>"
                                   "</head><body><p><a href=\"index.html\">back to the report</a> · <a href=\"{}\">{}</a></p><pre>",
                                   h(name), name, name);
    for (size_t i = 0; i < code.size(); ++i) {
      html += fmt::format("<span id=\"L{0}\"><a class=\"n\" href=\"#L{0}\">{0}</a>{1}</span>\n", i + 1, h(code[i]));
    }
    html += "</pre></body></html>\n";
    asError([&] { files::writeAtomic(dir / f.page, html); });
    files.push_back(std::move(f));
  }
  return files;
}

std::string implText(const json& impl) {
  std::vector<std::string> parts;
  if (!impl.is_array()) return "";
  for (const json& r : impl) {
    int64_t maxBatch = r.value("max_batch", int64_t{-1});
    std::string name = str(r, "impl");
    parts.push_back(maxBatch < 0 ? name : fmt::format("{} (batch <= {})", name, maxBatch));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

double costAt(const json& pair, double batch) {
  if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number() || !pair[1].is_number()) return 0;
  return pair[0].get<double>() + pair[1].get<double>() * batch;
}

void addKernels(Page& page, const json& kernels, const std::map<std::string, size_t>& nodeIndex,
                const std::vector<CodeFile>& code, bool kernelPicture) {
  page.section("kernels", "Kernels");
  page.html += "<p>In execution order. FLOPs and bytes per call at batch 1; the code links open the generated code at the kernel.</p>\n";
  page.html += "<table><tr><th>#</th><th>kernel</th><th>kind</th><th>domain</th><th>implementation</th><th>graph nodes</th>"
               "<th>FLOPs</th><th>bytes</th><th>code</th></tr>\n";
  for (size_t k = 0; k < kernels.size(); ++k) {
    const json& j = kernels[k];
    const std::string name = str(j, "name");
    std::string nodes;
    if (j.contains("nodes") && j["nodes"].is_array()) {
      for (const json& n : j["nodes"]) {
        if (!n.is_string()) continue;
        auto it = nodeIndex.find(n.get<std::string>());
        nodes += it == nodeIndex.end() ? h(n.get<std::string>()) + "<br>"
                                       : fmt::format("<a href=\"#node-{}\">{}</a><br>", it->second, h(n.get<std::string>()));
      }
    }
    std::string links;
    for (const CodeFile& f : code) {
      auto it = f.kernelLine.find(name);
      if (it != f.kernelLine.end()) links += fmt::format("<a href=\"{}#L{}\">{}:{}</a><br>", f.page, it->second, h(f.name), it->second);
    }
    // Graphviz gives a cluster no id of ours: the link goes to the kernel's first node in it.
    std::string title = kernelPicture ? fmt::format("<a href=\"#{}\">{}</a>", codegen::kernelDotNodeId(k, 0), h(name)) : h(name);
    page.html += fmt::format(
        "<tr id=\"kernel-row-{}\"><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td><td>{}</td>"
        "<td><code>{}</code></td><td class=\"num\">{:.0f}</td><td class=\"num\">{:.0f}</td><td>{}</td></tr>\n",
        k, k, title, h(str(j, "kind")), h(str(j, "domain")), h(implText(j.value("impl", json::array()))), nodes,
        costAt(j.value("flops", json()), 1), costAt(j.value("bytes", json()), 1), links);
  }
  page.html += "</table>\n";
}

void addNodes(Page& page, const json& nodes, const std::map<std::string, size_t>& kernelIndex, bool graphPicture) {
  page.section("nodes", "Nodes of the optimised graph");
  page.html += "<table><tr><th>#</th><th>node</th><th>op</th><th>type</th><th>from (the model's nodes)</th><th>kernel</th></tr>\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& n = nodes[i];
    if (str(n, "kind") == "param") continue;  // weights: in graph_optimized.pir
    std::string types, provenance;
    for (const json& t : n.value("types", json::array())) types += t.is_string() ? h(t.get<std::string>()) + " " : "";
    for (const json& p : n.value("provenance", json::array())) provenance += p.is_string() ? h(p.get<std::string>()) + "<br>" : "";
    const std::string kernel = str(n, "kernel");
    auto k = kernelIndex.find(kernel);
    std::string kernelCell = k == kernelIndex.end() ? h(kernel) : fmt::format("<a href=\"#kernel-row-{}\">{}</a>", k->second, h(kernel));
    std::string name = graphPicture ? fmt::format("<a href=\"#{}\">{}</a>", ir::dotNodeId(kOptimizedDotPrefix, i), h(str(n, "name")))
                                    : h(str(n, "name"));
    page.html += fmt::format("<tr id=\"node-{}\"><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td>"
                             "<td>{}</td><td><code>{}</code></td></tr>\n",
                             i, i, name, h(str(n, "op")), types, provenance, kernelCell);
  }
  page.html += "</table>\n";
}

// profile.json (policyc bench --profile --debug-dir): per benchmark row, each kernel's time.
void addProfile(Page& page, const json& profile, const std::map<std::string, size_t>& kernelIndex) {
  page.section("profile", "Profile");
  if (!profile.contains("rows") || !profile["rows"].is_array()) {
    page.html += "<p class=\"note\">profile.json holds no rows</p>\n";
    return;
  }
  for (const json& row : profile["rows"]) {
    page.html += fmt::format("<h3>batch {}, {} thread(s): {:.2f} µs per call (median)</h3>\n", row.value("batch", int64_t{0}),
                             row.value("threads", 0), row.value("median_us", 0.0));
    double most = 0;
    for (const json& k : row.value("kernels", json::array())) most = std::max(most, k.value("us_per_call", 0.0));
    page.html += "<table><tr><th>kernel</th><th>µs per call</th><th>GFLOP/s</th><th>GB/s</th><th>bound µs</th><th>× bound</th>"
                 "<th></th></tr>\n";
    for (const json& k : row.value("kernels", json::array())) {
      const std::string name = str(k, "name");
      auto it = kernelIndex.find(name);
      std::string cell = it == kernelIndex.end() ? h(name) : fmt::format("<a href=\"#kernel-row-{}\">{}</a>", it->second, h(name));
      double us = k.value("us_per_call", 0.0);
      // The bound (policyc bench's roofline): the least time the machine needs for the kernel's work.
      const double bound = k.value("bound_us", 0.0), over = k.value("over_bound", 0.0);
      page.html += fmt::format("<tr><td><code>{}</code></td><td class=\"num\">{:.3f}</td><td class=\"num\">{:.1f}</td>"
                               "<td class=\"num\">{:.1f}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
                               cell, us, k.value("gflops", 0.0), k.value("gbps", 0.0), bound > 0 ? fmt::format("{:.3f}", bound) : "",
                               over > 0 ? fmt::format("{:.1f}{}", over, over > 3 ? " ✱" : "") : "", bar(most > 0 ? us / most : 0));
    }
    page.html += "</table>\n";
  }
}

void addPre(Page& page, const fs::path& dir, const char* file, const char* id, const char* title) {
  std::optional<std::string> text = readText(dir / file);
  if (!text) return;
  page.section(id, title);
  page.html += fmt::format("<p><a href=\"{0}\">{0}</a></p><pre>{1}</pre>\n", file, hLines(*text));
}

void addFiles(Page& page, const fs::path& dir) {
  page.section("files", "Every file of this directory");
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  page.html += "<ul>\n";
  for (const std::string& n : names) {
    // Names of files the compile wrote; escaped all the same (a directory can hold anything),
    // and linked only when the name is a plain path component that needs no URL encoding.
    const bool plain = escape::fileName(n) == n;
    page.html += plain ? fmt::format("<li><a href=\"{0}\">{0}</a></li>\n", n) : fmt::format("<li>{}</li>\n", h(n));
  }
  page.html += "</ul>\n";
}

}  // namespace

fs::path writeReport(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("'{}' is not a debug directory (no such directory)", dir.string());
  std::optional<json> kernels = readJson(dir / "kernels.json");
  std::optional<json> nodes = readJson(dir / "nodes.json");
  if (kernels && !kernels->is_array()) kernels.reset();
  if (nodes && !nodes->is_array()) nodes.reset();
  std::map<std::string, size_t> kernelIndex, nodeIndex;
  std::vector<std::string> kernelNames;
  if (kernels) {
    for (size_t k = 0; k < kernels->size(); ++k) {
      kernelIndex[str((*kernels)[k], "name")] = k;
      kernelNames.push_back(str((*kernels)[k], "name"));
    }
  }
  if (nodes) {
    for (size_t i = 0; i < nodes->size(); ++i) nodeIndex[str((*nodes)[i], "name")] = i;
  }

  Page body;
  if (std::optional<std::string> command = readText(dir / "command.txt")) {
    body.section("command", "What was compiled, how and where");
    body.html += fmt::format("<pre>{}</pre>\n", hLines(*command));
  }
  addStages(body, dir);
  addPasses(body, dir);
  addPictures(body, dir);
  std::vector<CodeFile> code = writeCodePages(dir, kernelNames);
  if (kernels) addKernels(body, *kernels, nodeIndex, code, fs::exists(dir / "kernels.svg", ec));
  if (nodes) addNodes(body, *nodes, kernelIndex, fs::exists(dir / "graph_optimized.svg", ec));
  if (std::optional<json> profile = readJson(dir / "profile.json")) addProfile(body, *profile, kernelIndex);
  addPre(body, dir, "autotune.txt", "autotune", "The autotuner's choices");
  addPre(body, dir, "build.log", "build", "Build log");
  addFiles(body, dir);

  fs::path named = fs::absolute(dir, ec).lexically_normal();
  if (named.filename().empty()) named = named.parent_path();  // "dbg/"
  std::string title = fmt::format("policyc report: {}", named.filename().string());
  // The policy of the page: nothing runs and nothing is fetched, whatever a file of the
  // directory holds (an inlined SVG a tool other than Graphviz wrote, say); styles inline only.
  std::string html = fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                                 "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                                 "style-src 'unsafe-inline'; img-src 'self'\"><title>{}</title><style>{}</style></head><body>\n",
                                 h(title), kStyle);
  html += fmt::format("<h1>{}</h1>\n<nav>", h(title));
  for (const auto& [id, name] : body.sections) html += fmt::format("<a href=\"#{}\">{}</a>", id, h(name));
  html += "</nav>\n" + body.html + "</body></html>\n";
  const fs::path index = dir / "index.html";
  recordDebugFiles(dir, {"index.html"});
  asError([&] { files::writeAtomic(index, html); });
  return index;
}

}  // namespace policyc::driver
