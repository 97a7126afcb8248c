//===- LatentSplitAttend.cpp - split-KV MLA decode: the attend phase ------===//
//
// Phase 1 of `latent_attention_split` (LatentSplitPlan.h): a block per
// (token t, key split j, group of Hb heads), 4 warps per 16 heads. Each
// key is read from global memory once per block and scored against all Hb
// heads on the tensor cores (mma.sync m16n8k16, bf16, f32 accumulators):
// the heads are the M rows, so a cached latent costs one read per step
// instead of one per head.
//
// Per tile of K = 32 keys (in shared memory as bf16, rows padded by 8
// elements so that ldmatrix's 8 rows fall in distinct banks):
//   - the tiles come by cp.async, issued ahead of the math: with a bf16
//     cache straight into a ring of `stages` bf16 tiles (stages - 1 tiles
//     in flight); with an f32 cache into one staging tile in f32, which
//     each thread converts (its own 16-byte vectors: no barrier between
//     the copy's wait and the read) into one of two bf16 tiles, so one tile
//     is in flight (holding it in registers took 255 registers and
//     spills). A tile that reaches the new tokens (their latents are
//     another tensor) is loaded directly instead;
//   - scores, split over the channels: warp (head tile th, quarter q) holds
//     its 16 heads' absorbed queries for channels [144 q, 144 q + 144) as
//     A fragments in registers (loaded once; reloading all 576 channels
//     from shared memory every tile was the kernel's largest shared-memory
//     traffic) and computes their partial scores S_q[16 heads, 32 keys];
//   - the four partials of a head tile meet in shared memory (in the
//     accumulator layout, a 16-byte vector a lane and key octet); every
//     warp of the head tile sums them, so each holds the whole score rows,
//     the same running maximum m, and p = 2^(s - m) as the A fragments of
//     P (bf16, in registers);
//   - ctx[16 heads, channels of quarter q] = ctx alpha + P latent[:, q's
//     R / 4 channels], the latent tile transposed by ldmatrix.trans; 16
//     accumulators of 16 x 8 per warp.
// Two barriers a tile: after the tile is in shared memory, after the
// partial scores. The block then writes per head (ctx, m, l) to its partial
// row.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/LatentSplitPlan.h"

#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Kernels.h"

#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// Vectors of a tile a thread copies in unrolled code (forEachVector).
constexpr int64_t kUnrolledVectors = 9;

class AttendKernel {
public:
  AttendKernel(const LatentSplitAttendArgs &a)
      : a(a), kb(a.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        d(a.dims), tiles(d.headsPerBlock / 16), warps(4 * tiles),
        threads(32 * warps) {}

  void emit() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    lane = em.remu(tid, 32);
    Value warp = em.divu(tid, 32);
    th = em.divu(warp, 4);
    quarter = em.remu(warp, 4);
    g = em.divu(lane, 4);
    tig = em.remu(lane, 4);
    this->tid = tid;
    Value hg = em.remu(bid, d.headGroups());
    Value item = em.divu(bid, d.headGroups());
    Value numTokens = a.tokens;
    Value splits = latentSplitsPerToken(kb, d, numTokens);
    kb.ifThen(kb.lti(item, kb.muli(numTokens, splits)), [&] {
      t = arith::DivUIOp::create(b, loc, item, splits);
      Value j = arith::RemUIOp::create(b, loc, item, splits);
      std::tie(start, seq) =
          a.cu ? emitSequenceOf(kb, a.cu, t) : std::pair{kb.idx(0), kb.idx(0)};
      oldLen = kb.loadIndex(a.lens, {seq});
      capacity = kb.dim(a.cache.shape[1]);
      LatentSplit split = latentSplitOf(
          kb, d, latentKeyCount(kb, t, start, oldLen, capacity), splits);
      kb.ifThen(kb.lti(j, split.used), [&] {
        first = kb.muli(j, split.perSplit);
        end = kb.minsi(kb.addi(first, split.perSplit), split.count);
        head0 = kb.muli(hg, kb.idx(d.headsPerBlock));
        attend(item);
      });
    });
  }

private:
  int64_t width() const { return d.width(); }
  int64_t paddedWidth() const { return d.width() + 8; }
  /// Score channels of a quarter warp, and its k-steps of 16.
  int64_t scoreChannels() const { return width() / 4; }
  int64_t scoreSteps() const { return scoreChannels() / 16; }
  /// Key octets (16 x 8 score tiles) of a tile.
  int64_t octets() const { return d.keys / 8; }
  /// Whether the cache is bf16: copied straight into the bf16 tiles.
  bool direct() const { return a.cache.stored.isBF16(); }
  /// bf16 tiles in shared memory, and tiles in flight ahead of the one
  /// computed.
  int64_t buffers() const { return direct() ? d.stages : 2; }
  int64_t lookahead() const { return direct() ? d.stages - 1 : 1; }
  /// Elements per 16-byte vector of the cache, and vectors per thread and
  /// tile.
  int64_t vec() const { return 128 / a.cache.stored.getIntOrFloatBitWidth(); }
  int64_t vectorsPerThread() const {
    return d.keys * width() / vec() / threads;
  }
  int64_t channelsPerQuarter() const { return d.rank / 4; }

  void allocShared() {
    Value smem = em.dynamicSharedMemory();
    Type bf16 = b.getBF16Type();
    // The queries are read once, into registers, before the first tile is
    // copied: they share the ring's bytes (two blocks an SM fit).
    qs = em.sharedView(smem, bf16, kb.idx(0), {d.headsPerBlock, paddedWidth()});
    ks = em.sharedView(smem, bf16, kb.idx(0),
                       {buffers() * d.keys, paddedWidth()});
    int64_t off =
        2 * std::max(d.headsPerBlock, buffers() * d.keys) * paddedWidth();
    // Partial scores: [head tile, quarter, octet, lane] 16-byte vectors.
    sp = em.sharedView(smem, b.getF32Type(), kb.idx(off),
                       {tiles, 4, octets(), 32 * 4});
    off += 4 * tiles * 4 * octets() * 32 * 4;
    if (!direct())
      staging =
          em.sharedView(smem, a.cache.stored, kb.idx(off), {d.keys, width()});
  }

  /// The block's Hb absorbed queries, [Hb, R + Dr] bf16, into shared memory
  /// in 16-byte vectors.
  void stageQueries() {
    const int64_t perRow = width() / 8, total = d.headsPerBlock * perRow;
    auto vt = VectorType::get({8}, b.getBF16Type());
    for (int64_t i = 0; i < (total + threads - 1) / threads; ++i) {
      Value v = kb.addi(tid, kb.idx(i * threads));
      kb.ifThen(kb.lti(v, kb.idx(total)), [&] {
        Value row = em.divu(v, perRow);
        Value c = kb.muli(em.remu(v, perRow), kb.idx(8));
        Value x = em.alignedLoad(vt, a.qa, {t, kb.addi(head0, row), c});
        em.alignedStore(x, qs, {row, c});
      });
    }
  }

  /// The thread's vectors of a tile: vector i is (row, column) of the
  /// [K, R + Dr] tile, the same in the copy and the conversion.
  std::pair<Value, Value> vectorAt(int64_t i) {
    const int64_t perRow = width() / vec();
    Value v = kb.addi(tid, kb.idx(i * threads));
    return {em.divu(v, perRow), kb.muli(em.remu(v, perRow), kb.idx(vec()))};
  }
  /// body(row, column) for each of the thread's vectors of a tile. Up to
  /// kUnrolledVectors a thread (the 32-head block: 256 threads) the copies
  /// are unrolled and their coordinates, invariant in the key loop, are
  /// computed once before it; more (the 16-head block's 128 threads) kept
  /// that many coordinates and addresses live across the key loop and
  /// spilled (255 registers and 60 bytes of stack), so there the vectors
  /// are a loop from the thread's id in steps of the block's threads, which
  /// computes each vector's coordinates where it is copied.
  void forEachVector(const std::function<void(Value, Value)> &body) {
    if (vectorsPerThread() <= kUnrolledVectors) {
      for (int64_t v = 0; v < vectorsPerThread(); ++v) {
        auto [row, c] = vectorAt(v);
        body(row, c);
      }
      return;
    }
    const int64_t perRow = width() / vec();
    auto loop = scf::ForOp::create(b, loc, tid, kb.idx(d.keys * perRow),
                                   kb.idx(threads));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value v = loop.getInductionVar();
    body(em.divu(v, perRow), kb.muli(em.remu(v, perRow), kb.idx(vec())));
  }
  /// Key k0 + row, clamped to the split's last key (rows past it are
  /// masked; they only need finite values).
  Value keyOf(Value k0, Value row) {
    return kb.minsi(kb.addi(k0, row), kb.subi(end, kb.idx(1)));
  }
  /// Whether every row of the tile at k0 is a cached one.
  Value cachedTile(Value k0) {
    Value lastRow =
        kb.minsi(kb.addi(k0, kb.idx(d.keys - 1)), kb.subi(end, kb.idx(1)));
    return kb.lti(lastRow, oldLen);
  }
  Value tileStart(Value i) {
    return kb.addi(first, kb.muli(i, kb.idx(d.keys)));
  }
  /// First row of tile i's bf16 buffer.
  Value bufferRow(Value i) {
    return kb.muli(em.remu(i, buffers()), kb.idx(d.keys));
  }

  /// cp.async of the thread's vectors of tile i, if it is in the split and
  /// all cached (a block-uniform branch): into its bf16 buffer, or the
  /// staging tile. One commit group per tile, empty or not, so that the
  /// waits count tiles (its token orders the waits after the prologue's).
  Value issueTile(Value i) {
    Value k0 = tileStart(i);
    kb.ifThen(kb.andi(kb.lti(k0, end), cachedTile(k0)), [&] {
      Value base = direct() ? bufferRow(i) : kb.idx(0);
      Value dst = direct() ? ks : staging;
      forEachVector([&](Value row, Value c) {
        em.asyncCopy(dst, {kb.addi(base, row), c}, a.cacheView,
                     {seq, keyOf(k0, row), c}, vec(), Value());
      });
    });
    return em.commitGroup();
  }

  /// Tile i in bf16 in its buffer: the thread's copies waited for (and,
  /// from the staging tile, converted), or loaded directly where the tile
  /// reaches the new tokens' latents.
  void fillTile(Value i) {
    Value k0 = tileStart(i), rowBase = bufferRow(i);
    // The tiles after tile i (lookahead - 1 of them) may still be in
    // flight; each tile is one commit group, so this waits for tile i only.
    em.waitGroups(copies, int32_t(lookahead() - 1));
    auto vt = VectorType::get({vec()}, b.getBF16Type());
    auto store = [&](ArrayRef<Value> x, Value row, Value c) {
      SmallVector<Value> h;
      for (Value e : x)
        h.push_back(em.bf16(e));
      em.alignedStore(vector::FromElementsOp::create(b, loc, vt, h), ks,
                      {kb.addi(rowBase, row), c});
    };
    auto branch = scf::IfOp::create(b, loc, TypeRange{}, cachedTile(k0), true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    if (!direct())
      forEachVector([&](Value row, Value c) {
        store(em.loadVector(staging, {row, c}, vec()), row, c);
      });
    b.setInsertionPointToStart(branch.elseBlock());
    Value lastCached = kb.subi(capacity, kb.idx(1));
    Value lastToken = kb.subi(a.tokens, kb.idx(1));
    forEachVector([&](Value row, Value c) {
      Value s = keyOf(k0, row);
      Value isOld = kb.lti(s, oldLen);
      Value newT = kb.addi(start, kb.subi(s, oldLen));
      newT = kb.maxsi(kb.minsi(newT, lastToken), kb.idx(0));
      SmallVector<Value> old =
          em.loadVector(a.cacheView, {seq, kb.minsi(s, lastCached), c}, vec());
      SmallVector<Value> fresh = em.loadVector(a.latent, {newT, c}, vec());
      SmallVector<Value> x;
      for (int64_t e = 0; e < vec(); ++e)
        x.push_back(kb.select(isOld, old[e], fresh[e]));
      store(x, row, c);
    });
  }

  /// The warp's A fragments of qa: its head tile's 16 rows, its quarter's
  /// channels, one fragment a k-step.
  SmallVector<Value> queryFragments() {
    auto [ar, ac] = em.ldmatrixLaneA(lane);
    Value row = kb.addi(kb.muli(th, kb.idx(16)), ar);
    Value c0 = kb.addi(kb.muli(quarter, kb.idx(scoreChannels())), ac);
    SmallVector<Value> frags;
    for (int64_t k = 0; k < scoreSteps(); ++k)
      frags.push_back(
          em.ldmatrix4(qs, {row, kb.addi(c0, kb.idx(16 * k))}, false));
    return frags;
  }

  /// The quarter's partial scores S_q[16 heads, 32 keys] of the tile at
  /// `rowBase`, one accumulator per key octet.
  SmallVector<Acc> partialScores(ArrayRef<Value> qa, Value rowBase) {
    auto [br, bc] = em.ldmatrixLaneB(lane);
    Value c0 = kb.addi(kb.muli(quarter, kb.idx(scoreChannels())), bc);
    SmallVector<Acc> s(octets(), em.zero());
    for (int64_t k = 0; k < scoreSteps(); ++k)
      for (int64_t o = 0; o < octets(); o += 2) {
        auto bs = em.loadB2(ks,
                            {kb.addi(rowBase, kb.addi(br, kb.idx(8 * o))),
                             kb.addi(c0, kb.idx(16 * k))},
                            /*fromKN=*/false);
        s[o] = em.mma(qa[k], bs[0], s[o]);
        s[o + 1] = em.mma(qa[k], bs[1], s[o + 1]);
      }
    return s;
  }

  /// The head tile's whole scores: the four quarters' partials through
  /// shared memory (a barrier inside).
  SmallVector<Acc> sumQuarters(ArrayRef<Acc> part) {
    Value at = kb.muli(lane, kb.idx(4));
    for (int64_t o = 0; o < octets(); ++o)
      em.storeVector(part[o], sp, {th, quarter, kb.idx(o), at});
    gpu::BarrierOp::create(b, loc);
    SmallVector<Acc> s(octets(), em.zero());
    for (int64_t q = 0; q < 4; ++q)
      for (int64_t o = 0; o < octets(); ++o) {
        SmallVector<Value> x =
            em.loadVector(sp, {th, kb.idx(q), kb.idx(o), at}, 4);
        for (int64_t e = 0; e < 4; ++e)
          s[o][e] = kb.add(s[o][e], x[e]);
      }
    return s;
  }

  Value exp2(Value x) { return math::Exp2Op::create(b, loc, x); }
  Value rowMax4(Value v) {
    for (int64_t off : {1, 2})
      v = kb.maxf(v, em.shuffleXor(v, off));
    return v;
  }
  Value rowSum4(Value v) {
    for (int64_t off : {1, 2})
      v = kb.add(v, em.shuffleXor(v, off));
    return v;
  }
  /// Row r (0: g, 1: g + 8) of the warp's head tile in the block's heads.
  Value headRow(int64_t r) {
    return kb.addi(kb.muli(th, kb.idx(16)), kb.addi(g, kb.idx(8 * r)));
  }
  /// The loop over the split's tiles; then the partial row.
  void attend(Value item) {
    allocShared();
    stageQueries();
    gpu::BarrierOp::create(b, loc);
    SmallVector<Value> qa = queryFragments();
    // Every warp's fragments loaded before the copies overwrite them.
    gpu::BarrierOp::create(b, loc);
    for (int64_t j = 0; j < lookahead(); ++j)
      copies = issueTile(kb.idx(j));
    Value numTiles =
        kb.divui(kb.addi(kb.subi(end, first), kb.idx(d.keys - 1)), d.keys);
    // m (rows g, g + 8), the lane's share of l, the context accumulators.
    SmallVector<Value> init = {kb.f32(-INFINITY), kb.f32(-INFINITY), kb.f32(0),
                               kb.f32(0)};
    init.append(4 * accumulators(), kb.f32(0));
    auto loop =
        scf::ForOp::create(b, loc, kb.idx(0), numTiles, kb.idx(1), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      scf::YieldOp::create(
          b, loc,
          tileStep(loop.getInductionVar(), loop.getRegionIterArgs(), qa));
    }
    ValueRange res = loop.getResults();
    writePartial(item, unflatten(res.drop_front(4)), {res[0], res[1]},
                 {rowSum4(res[2]), rowSum4(res[3])});
  }

  /// 16 x 8 context accumulators of a warp.
  int64_t accumulators() const { return channelsPerQuarter() / 8; }
  SmallVector<Acc> unflatten(ValueRange v) {
    SmallVector<Acc> acc(v.size() / 4);
    for (size_t n = 0; n < acc.size(); ++n)
      for (int64_t e = 0; e < 4; ++e)
        acc[n][e] = v[4 * n + e];
    return acc;
  }

  /// Tile i: filled, its successor's copies issued, scored, its weights,
  /// the context rescaled and accumulated. `it`: m, l, the context.
  SmallVector<Value> tileStep(Value i, ValueRange it, ArrayRef<Value> qa) {
    Value k0 = tileStart(i), rowBase = bufferRow(i);
    fillTile(i);
    // Tile i stored by all; tile i + lookahead's buffer read by none.
    gpu::BarrierOp::create(b, loc);
    issueTile(kb.addi(i, kb.idx(lookahead())));
    SmallVector<Acc> s = sumQuarters(partialScores(qa, rowBase));
    // Keys past the split score -inf (weight 0).
    Value ninf = kb.f32(-INFINITY);
    SmallVector<Value> rowMax = {ninf, ninf};
    for (int64_t o = 0; o < octets(); ++o) {
      Value key = kb.addi(k0, kb.addi(kb.idx(8 * o), kb.muli(tig, kb.idx(2))));
      Value ok0 = kb.lti(key, end);
      Value ok1 = kb.lti(kb.addi(key, kb.idx(1)), end);
      s[o] = {kb.select(ok0, s[o][0], ninf), kb.select(ok1, s[o][1], ninf),
              kb.select(ok0, s[o][2], ninf), kb.select(ok1, s[o][3], ninf)};
      for (int64_t r = 0; r < 2; ++r)
        rowMax[r] = kb.maxf(rowMax[r], kb.maxf(s[o][2 * r], s[o][2 * r + 1]));
    }
    SmallVector<Value> m(2), alpha(2), l(2);
    for (int64_t r = 0; r < 2; ++r) {
      m[r] = kb.maxf(it[r], rowMax4(rowMax[r]));
      alpha[r] = exp2(kb.sub(it[r], m[r]));
      l[r] = kb.mul(it[2 + r], alpha[r]);
    }
    SmallVector<Acc> p(octets());
    for (int64_t o = 0; o < octets(); ++o)
      for (int64_t e = 0; e < 4; ++e) {
        p[o][e] = exp2(kb.sub(s[o][e], m[e / 2]));
        l[e / 2] = kb.add(l[e / 2], p[o][e]);
      }
    SmallVector<Acc> acc = unflatten(it.drop_front(4));
    for (Acc &x : acc)
      for (int64_t e = 0; e < 4; ++e)
        x[e] = kb.mul(x[e], alpha[e / 2]);
    accumulate(acc, p, rowBase);
    SmallVector<Value> next = {m[0], m[1], l[0], l[1]};
    for (const Acc &x : acc)
      next.append(x.begin(), x.end());
    return next;
  }

  /// ctx += P latent: P's A fragments from the weights' accumulators
  /// (two key octets a k-step), the tile's quarter of the latent channels
  /// transposed by ldmatrix.
  void accumulate(SmallVector<Acc> &acc, ArrayRef<Acc> p, Value rowBase) {
    auto [ar, ac] = em.ldmatrixLaneA(lane);
    Value c0 = kb.muli(quarter, kb.idx(channelsPerQuarter()));
    for (int64_t k = 0; k < d.keys; k += 16) {
      Value af = em.accToA(p[k / 8], p[k / 8 + 1]);
      Value krow = kb.addi(rowBase, kb.addi(ar, kb.idx(k)));
      for (int64_t n = 0; n < int64_t(acc.size()); n += 2) {
        auto bs = em.loadB2(ks, {krow, kb.addi(c0, kb.addi(ac, kb.idx(8 * n)))},
                            /*fromKN=*/true);
        acc[n] = em.mma(af, bs[0], acc[n]);
        acc[n + 1] = em.mma(af, bs[1], acc[n + 1]);
      }
    }
  }

  /// The partial row of (item, head): ctx channels, then m and l.
  void writePartial(Value item, ArrayRef<Acc> acc, ArrayRef<Value> m,
                    ArrayRef<Value> l) {
    Value p = kb.idx(d.target);
    auto write = [&](Value part, Value row) {
      Value c0 = kb.addi(kb.muli(quarter, kb.idx(channelsPerQuarter())),
                         kb.muli(tig, kb.idx(2)));
      for (int64_t r = 0; r < 2; ++r) {
        Value head = kb.addi(head0, headRow(r));
        for (int64_t n = 0; n < int64_t(acc.size()); ++n)
          em.storeVector({acc[n][2 * r], acc[n][2 * r + 1]}, part,
                         {row, head, kb.addi(c0, kb.idx(8 * n))});
        kb.ifThen(
            kb.andi(kb.eqi(quarter, kb.idx(0)), kb.eqi(tig, kb.idx(0))), [&] {
              em.storeVector({m[r], l[r]}, part, {row, head, kb.idx(d.rank)});
            });
      }
    };
    auto branch = scf::IfOp::create(b, loc, TypeRange{}, kb.lti(item, p), true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    write(a.partFirst, item);
    b.setInsertionPointToStart(branch.elseBlock());
    write(a.partRest, kb.subi(item, p));
  }

  const LatentSplitAttendArgs &a;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  LatentSplitDims d;
  int64_t tiles, warps, threads;
  Value tid, lane, th, quarter, g, tig;
  Value t, start, seq, oldLen, capacity, first, end, head0;
  Value qs, ks, sp, staging;
  Value copies; // a commit group of the prologue's, for the waits
};

} // namespace

int64_t mlir::k3::latentSplitAttendSharedBytes(const LatentSplitDims &d,
                                               Type cacheType) {
  int64_t padded = d.width() + 8;
  bool direct = cacheType.isBF16();
  int64_t buffers = direct ? d.stages : 2;
  int64_t cacheBytes = cacheType.getIntOrFloatBitWidth() / 8;
  int64_t staging = direct ? 0 : cacheBytes * d.keys * d.width();
  int64_t partialScores = 4 * (d.headsPerBlock / 16) * 4 * d.keys * 16;
  return 2 * std::max(d.headsPerBlock, buffers * d.keys) * padded +
         partialScores + staging;
}

bool mlir::k3::latentSplitTilesDivide(const LatentSplitDims &d,
                                      Type cacheType) {
  int64_t vec = 128 / cacheType.getIntOrFloatBitWidth();
  int64_t threads = 32 * 4 * (d.headsPerBlock / 16);
  return d.width() % vec == 0 && (d.keys * d.width() / vec) % threads == 0;
}

void mlir::k3::emitLatentSplitAttend(const LatentSplitAttendArgs &a) {
  AttendKernel(a).emit();
}
