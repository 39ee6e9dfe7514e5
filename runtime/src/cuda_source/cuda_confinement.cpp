// A stranger's CUDA source, made safe for a server to compile: NVRTC reads
// files for #include and for some options, and puts what it read (or the
// paths it tried) in its log, which goes back to the client. So options are
// taken from a list of those that touch no file, every include is checked
// before NVRTC runs (an absolute path is opened whatever the search list),
// and --no-source-include keeps NVRTC from searching the server's working
// folder: with no -I either, no file on disk can be included.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/runtime/cuda_source.hpp"

namespace ferry {
namespace {

// NVRTC options that read or write no file and start nothing: the names
// before '=' (both spellings), and the short forms whose value is glued on.
constexpr std::array<std::string_view, 58> allowed_options = {
    "--define-macro", "-D", "--undefine-macro", "-U", "--std", "-std", "--use_fast_math", "-use_fast_math",
    "--ftz", "-ftz", "--prec-sqrt", "-prec-sqrt", "--prec-div", "-prec-div", "--fmad", "-fmad",
    "--maxrregcount", "-maxrregcount", "--extra-device-vectorization", "-extra-device-vectorization",
    "--generate-line-info", "-lineinfo", "--device-debug", "-G", "--restrict", "-restrict",
    "--device-as-default-execution-space", "-default-device", "--device-int128", "-device-int128",
    "--device-float128", "-device-float128", "--disable-warnings", "-w", "--diag-error", "-diag-error",
    "--diag-suppress", "-diag-suppress", "--diag-warn", "-diag-warn", "--display-error-number", "-err-no",
    "--no-display-error-number", "-no-err-no", "--brief-diagnostics", "-brief-diag", "--builtin-move-forward",
    "-builtin-move-forward", "--builtin-initializer-list", "-builtin-initializer-list", "--relocatable-device-code",
    "-rdc", "--dopt", "-dopt", "--modify-stack-limit", "-modify-stack-limit", "--fdevice-syntax-only",
    "-fdevice-syntax-only"};

std::string_view option_name(std::string_view option) {
  // -DNAME=1 and -UNAME carry their value without '='.
  if (option.starts_with("-D")) return "-D";
  if (option.starts_with("-U")) return "-U";
  return option.substr(0, option.find('='));
}

void check_option(const CudaSource& source, const std::string& option) {
  const std::string_view name = option_name(option);
  if (std::find(allowed_options.begin(), allowed_options.end(), name) != allowed_options.end()) return;
  throw UsageError(fmt::format(
      "cuda_kernel '{}': option '{}' is refused: a remote host compiles a client's source with no access to its "
      "files, so options that read or write them (-I, --include-path, -include, --pre-include, --pch, --time, "
      "-Xptxas, ...) or choose the target (ferryd does) are not taken; it takes {}",
      source.entry, option, fmt::join(allowed_options, " ")));
}

// The scan below does not lex the source as the compiler will (raw
// strings, digit separators and line splices inside literals make that easy
// to get wrong, and a wrong guess would hide an include in what looks like
// a comment). It is wider instead: every '#' and every __has_include
// anywhere, comments and string literals included, is looked at, so the
// compiler cannot see an include that the scan did not. The price is a
// refusal of, say, "#include </etc/x>" in a comment.
class IncludeScan {
 public:
  IncludeScan(const CudaSource& source) : source_(source), s_(source.source) {}

  void run() {
    for (std::size_t i = 0; i < s_.size(); ++i) {
      if (s_[i] == '#' || (s_[i] == '%' && i + 1 < s_.size() && s_[i + 1] == ':')) {
        directive(skip(i + (s_[i] == '#' ? 1 : 2)));
      } else if (s_.compare(i, has_include.size(), has_include) == 0 && (i == 0 || !ident_char(s_[i - 1]))) {
        std::size_t at = i + has_include.size();
        if (s_.compare(at, 5, "_next") == 0) at += 5;
        at = skip(at);
        if (at >= s_.size() || s_[at] != '(')
          refuse("__has_include", "must be followed by (\"header\") or (<header>)");
        operand(skip(at + 1), "__has_include");
      }
    }
  }

 private:
  static constexpr std::string_view has_include = "__has_include";

  static bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

  // Past blanks, newlines, line splices and comments of either kind: more
  // than the compiler skips between a '#' and its directive, never less.
  std::size_t skip(std::size_t i) {
    while (i < s_.size()) {
      const char c = s_[i];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v' || c == '\\') {
        ++i;
      } else if (s_.compare(i, 2, "//") == 0) {
        i = newline_.after(i);
      } else if (s_.compare(i, 2, "/*") == 0) {
        const std::size_t end = comment_end_.after(i + 2);
        i = end == s_.size() ? end : end + 2;
      } else {
        break;
      }
    }
    return i;
  }

  void directive(std::size_t at) {
    std::size_t end = at;
    while (end < s_.size() && ident_char(s_[end])) ++end;
    const std::string_view name = s_.substr(at, end - at);
    if (name == "include" || name == "include_next" || name == "import" || name == "embed")
      operand(skip(end), fmt::format("#{}", name));
  }

  // "name" or <name>, and a name that stays inside what NVRTC was given.
  void operand(std::size_t at, const std::string& what) {
    const char open = at < s_.size() ? s_[at] : '\0';
    const char close = open == '"' ? '"' : open == '<' ? '>' : '\0';
    if (close == '\0') {
      const std::size_t end = std::min(s_.find('\n', at), s_.size());
      refuse(what + " " + std::string(s_.substr(at, std::min<std::size_t>(end - at, 80))),
             "only a header named in quotes or angle brackets may be included on a remote host, not one a macro "
             "computes");
    }
    // Bounded, or "#include <#include <..." would scan to the one '>' at the end from every '#'.
    const std::size_t end = s_.substr(0, std::min(s_.size(), at + 1 + max_header_name)).find_first_of(std::string{close, '\n'}, at + 1);
    if (end == std::string_view::npos || s_[end] != close)
      refuse(what + " " + std::string(s_.substr(at, std::min<std::size_t>(80, s_.size() - at))), "it is not closed");
    const std::string_view path = s_.substr(at + 1, end - at - 1);
    const bool absolute = path.starts_with('/') || path.starts_with('\\') || path.find(':') != std::string_view::npos;
    bool parent = false;
    for (std::size_t from = 0; from <= path.size();) {
      const std::size_t stop = std::min(path.find_first_of("/\\", from), path.size());
      parent = parent || path.substr(from, stop - from) == "..";
      from = stop + 1;
    }
    if (absolute || parent)
      refuse(what + " " + std::string(s_.substr(at, end - at + 1)),
             "a remote host compiles a client's source with no access to its files; put the headers it needs "
             "into the source");
  }

  [[noreturn]] void refuse(const std::string& what, const char* why) const {
    throw UsageError(fmt::format("cuda_kernel '{}': {} is refused: {}", source_.entry, what, why));
  }

  // The next `text` at or after a position. Asked for positions that
  // mostly grow, it remembers its last answer, so that "#/*#/*#/*..."
  // searches the source once, not once per '#'.
  class Next {
   public:
    Next(std::string_view s, std::string_view text) : s_(s), text_(text) {}
    std::size_t after(std::size_t from) {
      if (from < from_ || from > found_) {
        from_ = from;
        found_ = std::min(s_.find(text_, from), s_.size());
      }
      return found_;
    }

   private:
    std::string_view s_, text_;
    std::size_t from_ = 1, found_ = 0;  // nothing remembered
  };

  static constexpr std::size_t max_header_name = 256;
  const CudaSource& source_;
  std::string_view s_;
  Next newline_{s_, "\n"}, comment_end_{s_, "*/"};
};

}  // namespace

void confine_cuda_source(CudaSource& source) {
  for (const std::string& option : source.options) check_option(source, option);
  IncludeScan(source).run();
  // Quoted includes would otherwise be searched for in the compiling process's working folder.
  if (std::find(source.options.begin(), source.options.end(), "--no-source-include") == source.options.end())
    source.options.emplace_back("--no-source-include");
}

}  // namespace ferry
