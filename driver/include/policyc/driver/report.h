// The debug report: one static page (index.html) over what a compile wrote into its debug
// directory — the command, the stages and their times, what each pass changed, the graphs and
// kernels as pictures, the kernel table linked to its lines of generated code and its graph nodes,
// the autotuner's choices and, after `policyc bench --profile --debug-dir`, the profile.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "policyc/codegen/codegen.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/ir/graph.h"

namespace policyc::driver {

// The id prefix of graph_optimized.svg's nodes (ir::printDot), which the report links to.
inline constexpr const char* kOptimizedDotPrefix = "opt";

// nodes.json: the optimised graph's nodes in order (name, op, output types, provenance, and the
// kernel computing each, by the node's name in `kernelOfNode`).
std::string nodesJson(const ir::Graph& graph, const std::map<std::string, std::string>& kernelOfNode);
// kernels.json: the kernels in execution order (name, kind, domain, graph nodes, buffers read
// and written, FLOPs and bytes per call as a + b * batch, and the implementation per batch range).
std::string kernelsJson(const codegen::KernelProgram& program, const codegen::ImplChoice& dispatch);

// Writes DIR/index.html and, for each code file there (output_code.cpp, module.ll,
// module.opt.ll), a page of it with an anchor per line (DIR/code_NAME.html). Reads only what is
// there: a directory from a failed compile still gets a page of what it has. Every text from the
// model (names, provenance, code) is escaped; the page loads nothing from the network and runs no
// script. Returns the path of index.html; Error if DIR is not a directory or cannot be written.
std::filesystem::path writeReport(const std::filesystem::path& dir);

}  // namespace policyc::driver
