//===- ImportError.cpp - k3-import's errors and warnings ------------------===//
#include "tools/k3-import/lib/ImportError.h"

#include "llvm/Support/raw_ostream.h"

#include <sstream>

namespace k3import {

char FieldError::ID = 0;

void FieldError::log(llvm::raw_ostream &os) const {
  if (!field_.empty())
    os << field_ << ": ";
  os << message_;
}

llvm::Error fieldError(std::string field, std::string message) {
  return llvm::make_error<FieldError>(std::move(field), std::move(message));
}

std::string formatNumber(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

} // namespace k3import
