//===- ImportError.h - k3-import's errors and warnings ----------*- C++ -*-===//
//
// The importer library never prints and never exits: a config problem travels
// back to k3-import's main as an llvm::Error holding a FieldError, the field
// path (`text_config.linear_attn_config.kda_layers`, empty for a problem of
// the file itself) and the message. main prints it as the one line
// `<config>: <field>: <what>` that test/Import checks, and exits 1. Warnings
// do not stop the import; they are collected for main to print in order.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_IMPORTERROR_H
#define K3_IMPORT_IMPORTERROR_H

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace k3import {

/// One config problem: where (a dotted field path) and what.
class FieldError : public llvm::ErrorInfo<FieldError> {
public:
  static char ID;
  FieldError(std::string field, std::string message)
      : field_(std::move(field)), message_(std::move(message)) {}

  /// The dotted path of the field; empty when the file as a whole is wrong.
  const std::string &field() const { return field_; }
  const std::string &text() const { return message_; }

  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string field_, message_;
};

/// The error `field: message`.
llvm::Error fieldError(std::string field, std::string message);

/// A field path and a message, not (yet) an error.
struct FieldMessage {
  std::string field, message;
};
/// A problem that does not stop the import (printed `<field>: warning: ...`).
using Warning = FieldMessage;
using Warnings = std::vector<Warning>;

/// `v` as the messages write numbers (shortest of %g: 1e-05, -7.5, 16).
std::string formatNumber(double v);

} // namespace k3import

#endif
