//===- k3-import.cpp - Hugging Face config.json to K3 IR --------*- C++ -*-===//
//
// k3-import config.json|DIR -o model.mlir [--max-context N] [--name NAME] ...
//
// Reads a Kimi K3 (`kimi_k3`, decoder fields under `text_config`) or Kimi
// Linear (`kimi_linear`) config.json and writes the model as K3 IR
// (docs/import.md). The work is done by the K3Import library (lib/): this
// file only reads the command line, calls it, prints, and is the only place
// that exits.
//
// Every config problem is one line `<config>: <field>: <what>` on stderr and
// exit code 1.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-import/lib/ConfigFile.h"
#include "tools/k3-import/lib/EmitModule.h"
#include "tools/k3-import/lib/ExpertPrecision.h"
#include "tools/k3-import/lib/ImportError.h"
#include "tools/k3-import/lib/ParseDecoder.h"

#include "mlir/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

using namespace k3import;

namespace {

struct Options {
  std::string in, out = "-", name;
  int64_t maxContext = -1; // -1: from the config
  bool f32Weights = false, bf16KdaOperands = false;
  bool dequantizedExperts = false;
  std::string activationDType;
};

void usage() {
  llvm::errs()
      << "usage: k3-import config.json|DIR -o model.mlir [--max-context "
         "N] [--name NAME] [--weight-dtype bf16|f32]\n"
         "                 [--kda-operand-dtype f32|bf16] "
         "[--activation-dtype f32|bf16]\n"
         "                 [--dequantized-experts]\n"
         "  Imports a Kimi K3 (kimi_k3, text_config) or Kimi Linear "
         "(kimi_linear)\n"
         "  Hugging Face config.json as K3 IR (docs/import.md); a "
         "checkpoint\n  directory DIR stands for DIR/config.json "
         "(model named after DIR).\n"
         "  A quantization_config (MXFP4 routed experts) types the experts "
         "f4E2M1FN;\n  --dequantized-experts imports them as bf16 (the "
         "checkpoint's experts\n  were dequantised).\n";
}

/// `v` is one of `a` / `b` (the message names them in that order).
bool oneOf(const std::string &opt, const std::string &v, const char *a,
           const char *b) {
  if (v == a || v == b)
    return true;
  llvm::errs() << "k3-import: " << opt << ": '" << v << "' is not " << a
               << " or " << b << "\n";
  return false;
}

/// Reads one option that takes a value; false when the value is bad.
bool readValueOption(const std::string &a, const std::string &v, Options &o) {
  if (a == "-o")
    o.out = v;
  else if (a == "--name")
    o.name = v;
  else if (a == "--weight-dtype") {
    if (!oneOf(a, v, "bf16", "f32"))
      return false;
    o.f32Weights = v == "f32";
  } else if (a == "--kda-operand-dtype") {
    if (!oneOf(a, v, "f32", "bf16"))
      return false;
    o.bf16KdaOperands = v == "bf16";
  } else if (a == "--activation-dtype") {
    if (!oneOf(a, v, "f32", "bf16"))
      return false;
    o.activationDType = v;
  } else { // --max-context
    char *end = nullptr;
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || n < 1 || n > (1ll << 31)) {
      llvm::errs() << "k3-import: --max-context: '" << v
                   << "' is not a positive integer\n";
      return false;
    }
    o.maxContext = n;
  }
  return true;
}

/// The command line; an exit code when the program should stop here.
std::optional<int> parseArgs(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o" || a == "--name" || a == "--weight-dtype" ||
        a == "--kda-operand-dtype" || a == "--activation-dtype" ||
        a == "--max-context") {
      if (i + 1 >= argc) {
        llvm::errs() << "k3-import: " << a << " needs a value\n";
        return 1;
      }
      if (!readValueOption(a, argv[++i], o))
        return 1;
    } else if (a == "--dequantized-experts") {
      o.dequantizedExperts = true;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      llvm::errs() << "k3-import: unknown option " << a << "\n";
      usage();
      return 1;
    } else if (o.in.empty()) {
      o.in = a;
    } else {
      llvm::errs() << "k3-import: more than one input file\n";
      return 1;
    }
  }
  if (o.in.empty()) {
    usage();
    return 1;
  }
  return std::nullopt;
}

std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return path.substr(slash == std::string::npos ? 0 : slash + 1);
}

/// A checkpoint directory stands for its config.json, and names the model.
bool resolveCheckpointDir(Options &o) {
  if (!llvm::sys::fs::is_directory(o.in))
    return true;
  while (o.in.size() > 1 && o.in.back() == '/')
    o.in.pop_back();
  if (o.name.empty())
    o.name = baseName(o.in);
  std::string dir = o.in;
  o.in += "/config.json";
  if (llvm::sys::fs::exists(o.in))
    return true;
  llvm::errs() << dir << ": checkpoint directory has no config.json\n";
  return false;
}

/// Prints `<config>: [<field>: ]<what>` for each error in `e`.
void printErrors(const std::string &config, llvm::Error e) {
  llvm::handleAllErrors(std::move(e), [&](const FieldError &fe) {
    llvm::errs() << config << ": ";
    fe.log(llvm::errs());
    llvm::errs() << "\n";
  });
}

void printWarnings(const std::string &config, const Warnings &warnings) {
  for (const Warning &w : warnings)
    llvm::errs() << config << ": " << w.field << ": warning: " << w.message
                 << "\n";
}

/// The module's options from the command line and the config's defaults.
EmitOptions emitOptions(const Options &o, const Config &cfg) {
  EmitOptions e;
  e.maxContext = o.maxContext >= 0 ? o.maxContext
                 : cfg.maxPosition ? std::min<int64_t>(cfg.maxPosition, 4096)
                                   : 4096;
  e.name = o.name;
  if (e.name.empty()) {
    e.name = baseName(o.in);
    if (e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".json") == 0)
      e.name.resize(e.name.size() - 5);
  }
  e.f32Weights = o.f32Weights;
  e.bf16KdaOperands = o.bf16KdaOperands;
  e.activationDType = o.activationDType;
  return e;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  if (std::optional<int> rc = parseArgs(argc, argv, o))
    return *rc;
  if (!resolveCheckpointDir(o))
    return 1;
  ::k3::json::Value root;
  if (llvm::Error e = readConfigJson(o.in, root)) {
    printErrors(o.in, std::move(e));
    return 1;
  }
  Warnings warnings;
  llvm::Expected<ParsedConfig> parsed = parseConfig(root, warnings);
  printWarnings(o.in, warnings);
  if (!parsed) {
    printErrors(o.in, parsed.takeError());
    return 1;
  }
  const Config &cfg = parsed->decoder;
  llvm::Expected<ExpertPrecision> experts =
      expertPrecision(*parsed, o.dequantizedExperts);
  if (!experts) {
    printErrors(o.in, experts.takeError());
    return 1;
  }

  mlir::MLIRContext ctx;
  EmitOptions opts = emitOptions(o, cfg);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      emitModule(ctx, cfg, *experts, opts);
  if (mlir::failed(mlir::verify(*module))) {
    llvm::errs() << o.in
                 << ": internal error: the imported module does not verify\n";
    return 2;
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(o.out, ec, llvm::sys::fs::OF_None);
  if (ec) {
    llvm::errs() << "k3-import: cannot write " << o.out << ": " << ec.message()
                 << "\n";
    return 1;
  }
  os << "// Imported by k3-import from " << o.in << " (" << cfg.layers
     << " layers).\n";
  module->print(os);
  os << "\n";
  return 0;
}
