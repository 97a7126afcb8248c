//===- StateInPlace.cpp - ops that update their state in place --*- C++ -*-===//
//
// The rules, per op and kernel (each kernel's header comment says why it
// holds):
// * k3.latent_attention, k3.latent_cache_append, any kernel: the new rows
//   go to positions >= cache_lens, which no key read of the call touches
//   (keys come from the old rows or the new latents); in place the old rows
//   are not copied.
// * k3.kda on `kda_recurrent`: a block loads its (sequence, head, columns)
//   tile of the state before its first token and stores the same tile after
//   its last; no other block touches it.
// * k3.short_conv on `short_conv_rows`, in the decode entry only: there a
//   sequence has at most one token (the runtime refuses more,
//   input_checks.cpp), so one thread reads and then writes each (sequence,
//   channel) window. In prefill a sequence's first and last tokens may sit
//   in different blocks.
// * k3.short_conv_group on `short_conv_rows` (decode entries only): each
//   member's window as for k3.short_conv, each thread in one member.
//
//===----------------------------------------------------------------------===//
#include "lowering/StateInPlace.h"

#include "lowering/ModelFunction.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The kernel kind `op` was configured with (the loop nest without one).
KernelKind kindOf(Operation *op) {
  KernelConfigAttr c =
      K3Dialect::KernelConfigAttrHelper(op->getContext()).getAttr(op);
  return c ? c.getKernel() : KernelKind::loop_nest;
}

/// The state operand that `result` updates, where its kernel allows one
/// buffer for both; null otherwise.
Value stateOperandOf(OpResult result) {
  Operation *op = result.getOwner();
  if (auto o = dyn_cast<LatentAttentionOp>(op))
    return result == o.getLatentCacheOut() ? o.getLatentCache() : Value();
  if (auto o = dyn_cast<LatentCacheAppendOp>(op))
    return o.getCache();
  if (auto o = dyn_cast<KDAOp>(op))
    return result == o.getFinalState() &&
                   kindOf(op) == KernelKind::kda_recurrent
               ? o.getInitialState()
               : Value();
  if (auto o = dyn_cast<ShortConvOp>(op))
    return result == o.getFinalState() &&
                   kindOf(op) == KernelKind::short_conv_rows &&
                   inDecodeEntry(op)
               ? o.getConvState()
               : Value();
  if (auto o = dyn_cast<ShortConvGroupOp>(op)) {
    unsigned n = o.getInputs().size(), i = result.getResultNumber();
    return i >= n && kindOf(op) == KernelKind::short_conv_rows &&
                   inDecodeEntry(op)
               ? o.getConvStates()[i - n]
               : Value();
  }
  return Value();
}

/// Whether `read` and `write` are the only accesses of their state in
/// their function.
bool onlyAccessesOfState(StateReadOp read, StateWriteOp write) {
  auto fn = read->getParentOfType<func::FuncOp>();
  if (!fn || write->getParentOfType<func::FuncOp>() != fn)
    return false;
  int64_t reads = 0, writes = 0;
  fn.walk([&](Operation *op) {
    if (auto r = dyn_cast<StateReadOp>(op))
      reads += r.getName() == read.getName();
    else if (auto w = dyn_cast<StateWriteOp>(op))
      writes += w.getName() == read.getName();
  });
  return reads == 1 && writes == 1;
}

} // namespace

StateWriteOp mlir::k3::stateWrittenInPlace(OpResult result) {
  StateWriteOp write;
  for (Operation *user : result.getUsers()) {
    if (auto w = dyn_cast<StateWriteOp>(user)) {
      if (write)
        return nullptr;
      write = w;
    }
  }
  if (!write)
    return nullptr;
  // A returned result (or a view of it: bufferRoot, as the artifact planner
  // finds outputs) takes the output's buffer, not the state's: the state
  // would then need its copy.
  auto fn = result.getOwner()->getParentOfType<func::FuncOp>();
  if (fn)
    for (Block &block : fn.getBody())
      if (auto ret = dyn_cast<func::ReturnOp>(block.getTerminator()))
        for (Value v : ret.getOperands())
          if (bufferRoot(v) == result)
            return nullptr;
  Value state = stateOperandOf(result);
  auto read = state ? state.getDefiningOp<StateReadOp>() : nullptr;
  // Another reader of the old state would see the new one.
  if (!read || read.getName() != write.getName() || !state.hasOneUse())
    return nullptr;
  // Other users read the result from the state's buffer: nothing else
  // writes that buffer during the call (the state's one read and write),
  // and no op updates in place a value that is not a state read's.
  if (!result.hasOneUse() && !onlyAccessesOfState(read, write))
    return nullptr;
  return write;
}

bool mlir::k3::updatesStateInPlace(Operation *op) {
  return K3Dialect::StateInPlaceAttrHelper(op->getContext()).isAttrPresent(op);
}

bool mlir::k3::isUnreadState(OpResult result) {
  return result.use_empty() && stateOperandOf(result);
}

bool mlir::k3::leavesStateUnwritten(Operation *op) {
  return K3Dialect::UnreadStateAttrHelper(op->getContext()).isAttrPresent(op);
}
