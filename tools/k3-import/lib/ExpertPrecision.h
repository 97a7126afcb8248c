//===- ExpertPrecision.h - which routed experts are MXFP4 -------*- C++ -*-===//
//
// Applies a QuantizationScheme to the decoder's modules (ModelModules.h) and
// decides, per layer and routed-expert projection, whether the stacked
// expert weight is MXFP4. What the IR cannot express is an error naming the
// module: a quantized module other than a routed expert (K3 quantizes its
// routed experts alone, K3-SPEC §5), a stack whose experts differ (one
// stacked weight has one element type), an in-dim that is not a multiple of
// the MXFP4 group of 32.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_EXPERTPRECISION_H
#define K3_IMPORT_EXPERTPRECISION_H

#include "tools/k3-import/lib/ImportConfig.h"
#include "tools/k3-import/lib/ParseDecoder.h"
#include "tools/k3-import/lib/Quantization.h"

#include "llvm/Support/Error.h"

namespace k3import {

/// The elements of a row of weights that share one MXFP4 (E8M0) scale.
constexpr int64_t kMxfp4Group = 32;

llvm::Expected<ExpertPrecision>
planExpertPrecision(const Config &c, const QuantizationScheme &scheme);

/// The precision of `parsed`'s routed experts: all bf16 when it has no
/// quantization_config or `dequantizedExperts` (the checkpoint's experts
/// were dequantised; the quantization_config is then not read at all).
llvm::Expected<ExpertPrecision> expertPrecision(const ParsedConfig &parsed,
                                                bool dequantizedExperts);

} // namespace k3import

#endif
