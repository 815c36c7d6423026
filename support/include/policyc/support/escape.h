// One escaping rule per context for text that comes from a model file (node and value names,
// locations, graph names): such text is hostile until it has passed through one of these.
//
// Every function is total (any bytes in, valid text for its context out) and keeps printable
// ASCII readable; everything else is encoded, so no byte of a name can end a comment, a string
// literal, a line, a path component or a terminal escape sequence.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace policyc::escape {

// For messages and terminal output (one line): printable ASCII stays; control characters, DEL and
// bytes >= 0x80 become \xNN. Idempotent, so a message may pass through it more than once.
std::string message(std::string_view text);

// For the inside of a C/C++ comment (// or /* */): printable ASCII except \ * ? stays; those
// three, control characters and bytes >= 0x80 become \xNN. Cannot end a comment, continue a line
// (a backslash before the newline) or form a trigraph.
std::string cComment(std::string_view text);

// For the inside of a C/C++ string literal ("..."): printable ASCII except \ " ? stays; everything
// else is a three-digit octal escape (octal escapes, unlike \x, never swallow a following digit).
std::string cString(std::string_view text);

// A C identifier made from the text: letters and digits kept, every run of anything else one
// '_', at most maxLen characters, never empty and never starting with a digit ("m_" prefixed).
// Different texts may map to the same identifier: callers that need uniqueness add a suffix.
std::string cIdentifier(std::string_view text, size_t maxLen = 40);

// For the quoted strings of LLVM IR (value names, metadata strings) and other dumps: printable
// ASCII except \ and " stays, everything else \xNN (LLVM's own \NN form would be ambiguous to a
// reader of the .ll file).
std::string printable(std::string_view text);

// For the inside of a Graphviz DOT quoted string (ids and labels): printable ASCII except \ and "
// stays; " becomes \" and \ becomes \\ (DOT's only escapes; in a label \\ shows one backslash, so
// no name can form \n, \l or \N); every other byte is shown as the four characters \xNN.
std::string dot(std::string_view text);

// For HTML text and attribute values (quoted with " or '): & < > " ' become character
// references, control characters, DEL and bytes >= 0x80 the text \xNN (the page stays ASCII).
std::string html(std::string_view text);

// One path component for a model-provided name (an output's .npy file, a repro input): the
// characters A-Z a-z 0-9 _ - . stay, every other byte and a leading '.' become %XX (so the name
// can never be "", ".", "..", absolute, or contain '/'); reversible by fileNameToText. Names whose
// encoding would exceed 200 bytes are cut and end in "~" + 16 hex digits of a hash of the whole
// name (not reversible; see docs/security.md).
std::string fileName(std::string_view text);
// The text fileName encoded; nullopt for a name that fileName cannot have produced (or a hashed one).
std::optional<std::string> fileNameToText(std::string_view name);

}  // namespace policyc::escape
