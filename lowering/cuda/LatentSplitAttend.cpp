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
//   - scores: warp (head tile th, quarter q) computes S[16 heads, keys
//     8q .. 8q + 7] = qa . latent over the R + Dr channels (qa already in
//     log2 units);
//   - the row maxima of the quarters meet in shared memory; every warp of a
//     head tile then holds the same running maximum m, so its weights
//     p = 2^(s - m) (bf16) go to shared memory as one [16, K] tile;
//   - ctx[16 heads, channels of quarter q] = ctx alpha + P latent[:, q's
//     R / 4 channels], P from shared memory (ldmatrix), the latent tile
//     transposed by ldmatrix.trans; 16 accumulators of 16 x 8 per warp.
// Three barriers a tile: after the conversion of the tile, after the
// maxima, after P. After the last tile the quarters' weight sums meet in shared
// memory and the block writes per head (ctx, m, l) to its partial row.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/LatentSplitPlan.h"

#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Kernels.h"

#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

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
    Value numTokens = kb.tokens();
    Value splits = latentSplitsPerToken(kb, d, numTokens);
    kb.ifThen(kb.lti(item, kb.muli(numTokens, splits)), [&] {
      t = arith::DivUIOp::create(b, loc, item, splits);
      Value j = arith::RemUIOp::create(b, loc, item, splits);
      std::tie(start, seq) =
          a.cu ? emitSequenceOf(kb, a.cu, t) : std::pair{kb.idx(0), kb.idx(0)};
      oldLen = kb.loadIndex(a.lens, {seq});
      capacity = kb.dim(a.cache.shape[1]);
      LatentSplit split = latentSplitOf(
          kb, latentKeyCount(kb, t, start, oldLen, capacity), splits);
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
  static constexpr int64_t kPStride = kLatentSplitKeys + 8;
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
    return kLatentSplitKeys * width() / vec() / threads;
  }
  int64_t channelsPerQuarter() const { return d.rank / 4; }

  void allocShared() {
    Value smem = em.dynamicSharedMemory();
    Type bf16 = b.getBF16Type();
    int64_t off = 0;
    qs = em.sharedView(smem, bf16, kb.idx(off),
                       {d.headsPerBlock, paddedWidth()});
    off += 2 * d.headsPerBlock * paddedWidth();
    ks = em.sharedView(smem, bf16, kb.idx(off),
                       {buffers() * kLatentSplitKeys, paddedWidth()});
    off += 2 * buffers() * kLatentSplitKeys * paddedWidth();
    ps = em.sharedView(smem, bf16, kb.idx(off), {d.headsPerBlock, kPStride});
    off += 2 * d.headsPerBlock * kPStride;
    mx = em.sharedView(smem, b.getF32Type(), kb.idx(off), {d.headsPerBlock, 4});
    off += 4 * d.headsPerBlock * 4;
    if (!direct())
      staging = em.sharedView(smem, a.cache.stored, kb.idx(off),
                              {kLatentSplitKeys, width()});
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
  /// Key k0 + row, clamped to the split's last key (rows past it are
  /// masked; they only need finite values).
  Value keyOf(Value k0, Value row) {
    return kb.minsi(kb.addi(k0, row), kb.subi(end, kb.idx(1)));
  }
  /// Whether every row of the tile at k0 is a cached one.
  Value cachedTile(Value k0) {
    Value lastRow = kb.minsi(kb.addi(k0, kb.idx(kLatentSplitKeys - 1)),
                             kb.subi(end, kb.idx(1)));
    return kb.lti(lastRow, oldLen);
  }
  Value tileStart(Value i) {
    return kb.addi(first, kb.muli(i, kb.idx(kLatentSplitKeys)));
  }
  /// First row of tile i's bf16 buffer.
  Value bufferRow(Value i) {
    return kb.muli(em.remu(i, buffers()), kb.idx(kLatentSplitKeys));
  }

  /// cp.async of the thread's vectors of tile i, if it is in the split and
  /// all cached (a block-uniform branch): into its bf16 buffer, or the
  /// staging tile. One commit group per tile, empty or not, so that the
  /// waits count tiles.
  void issueTile(Value i) {
    Value k0 = tileStart(i);
    kb.ifThen(kb.andi(kb.lti(k0, end), cachedTile(k0)), [&] {
      Value base = direct() ? bufferRow(i) : kb.idx(0);
      Value dst = direct() ? ks : staging;
      for (int64_t v = 0; v < vectorsPerThread(); ++v) {
        auto [row, c] = vectorAt(v);
        em.asyncCopy(dst, {kb.addi(base, row), c}, a.cacheView,
                     {seq, keyOf(k0, row), c}, vec(), Value());
      }
    });
    em.commitGroup();
  }

  /// Tile i in bf16 in its buffer: the thread's copies waited for (and,
  /// from the staging tile, converted), or loaded directly where the tile
  /// reaches the new tokens' latents.
  void fillTile(Value i) {
    Value k0 = tileStart(i), rowBase = bufferRow(i);
    em.waitGroups(em.commitGroup(), int32_t(lookahead()));
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
      for (int64_t v = 0; v < vectorsPerThread(); ++v) {
        auto [row, c] = vectorAt(v);
        store(em.loadVector(staging, {row, c}, vec()), row, c);
      }
    b.setInsertionPointToStart(branch.elseBlock());
    Value lastCached = kb.subi(capacity, kb.idx(1));
    Value lastToken = kb.subi(kb.tokens(), kb.idx(1));
    for (int64_t v = 0; v < vectorsPerThread(); ++v) {
      auto [row, c] = vectorAt(v);
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
    }
  }

  /// S[16 heads of tile th, keys 8 quarter ..] of the tile at `rowBase`.
  Acc scores(Value rowBase) {
    auto [ar, ac] = em.ldmatrixLaneA(lane);
    Value arow = kb.addi(kb.muli(th, kb.idx(16)), ar);
    Value brow = kb.addi(
        rowBase, kb.addi(kb.muli(quarter, kb.idx(8)), em.remu(lane, 8)));
    Value bcol = kb.muli(em.divu(lane, 8), kb.idx(8));
    Acc s = em.zero();
    for (int64_t k = 0; k < width(); k += 32) {
      Value bx4 = em.ldmatrix4(ks, {brow, kb.addi(bcol, kb.idx(k))}, false);
      for (int64_t u = 0; u < 2; ++u) {
        Value af =
            em.ldmatrix4(qs, {arow, kb.addi(ac, kb.idx(k + 16 * u))}, false);
        s = em.mma(af, em.rows(bx4, 2 * u, 2), s);
      }
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
  /// Each quarter's `v[r]` for row r, exchanged through shared memory,
  /// combined over the four quarters with `combine`. Barrier inside.
  SmallVector<Value, 2>
  acrossQuarters(ArrayRef<Value> v,
                 const std::function<Value(Value, Value)> &combine) {
    kb.ifThen(kb.eqi(tig, kb.idx(0)), [&] {
      for (int64_t r = 0; r < 2; ++r)
        em.sts(v[r], mx, {headRow(r), quarter});
    });
    gpu::BarrierOp::create(b, loc);
    SmallVector<Value, 2> out;
    for (int64_t r = 0; r < 2; ++r) {
      Value x = em.lds(mx, {headRow(r), kb.idx(0)});
      for (int64_t q = 1; q < 4; ++q)
        x = combine(x, em.lds(mx, {headRow(r), kb.idx(q)}));
      out.push_back(x);
    }
    return out;
  }

  /// The loop over the split's tiles; then the partial row.
  void attend(Value item) {
    allocShared();
    stageQueries();
    const int64_t nAcc = channelsPerQuarter() / 8;
    Value numTiles =
        kb.divui(kb.addi(kb.subi(end, first), kb.idx(kLatentSplitKeys - 1)),
                 kLatentSplitKeys);
    for (int64_t j = 0; j < lookahead(); ++j)
      issueTile(kb.idx(j));
    SmallVector<Value> init = {kb.f32(-INFINITY), kb.f32(-INFINITY), kb.f32(0),
                               kb.f32(0)};
    init.append(4 * nAcc, kb.f32(0));
    auto loop =
        scf::ForOp::create(b, loc, kb.idx(0), numTiles, kb.idx(1), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value i = loop.getInductionVar();
      ValueRange it = loop.getRegionIterArgs();
      Value k0 = tileStart(i), rowBase = bufferRow(i);
      fillTile(i);
      // Tile i stored by all; tile i + lookahead's buffer read by none.
      gpu::BarrierOp::create(b, loc);
      issueTile(kb.addi(i, kb.idx(lookahead())));
      Acc s = scores(rowBase);
      // Keys past the split score -inf (weight 0).
      Value key = kb.addi(
          k0, kb.addi(kb.muli(quarter, kb.idx(8)), kb.muli(tig, kb.idx(2))));
      Value ok0 = kb.lti(key, end), ok1 = kb.lti(kb.addi(key, kb.idx(1)), end);
      Value ninf = kb.f32(-INFINITY);
      s = {kb.select(ok0, s[0], ninf), kb.select(ok1, s[1], ninf),
           kb.select(ok0, s[2], ninf), kb.select(ok1, s[3], ninf)};
      SmallVector<Value, 2> tileMax = acrossQuarters(
          {rowMax4(kb.maxf(s[0], s[1])), rowMax4(kb.maxf(s[2], s[3]))},
          [&](Value x, Value y) { return kb.maxf(x, y); });
      SmallVector<Value> m(2), alpha(2), l(2);
      Acc p;
      for (int64_t r = 0; r < 2; ++r) {
        m[r] = kb.maxf(it[r], tileMax[r]);
        alpha[r] = exp2(kb.sub(it[r], m[r]));
        p[2 * r] = exp2(kb.sub(s[2 * r], m[r]));
        p[2 * r + 1] = exp2(kb.sub(s[2 * r + 1], m[r]));
        l[r] =
            em.fmaContract(it[2 + r], alpha[r], kb.add(p[2 * r], p[2 * r + 1]));
        Value col =
            kb.addi(kb.muli(quarter, kb.idx(8)), kb.muli(tig, kb.idx(2)));
        em.alignedStore(em.pair(p[2 * r], p[2 * r + 1]), ps, {headRow(r), col});
      }
      gpu::BarrierOp::create(b, loc);
      SmallVector<Acc> acc(nAcc);
      for (int64_t n = 0; n < nAcc; ++n)
        for (int64_t e = 0; e < 4; ++e)
          acc[n][e] = kb.mul(it[4 + 4 * n + e], alpha[e / 2]);
      accumulate(acc, rowBase);
      SmallVector<Value> yield = {m[0], m[1], l[0], l[1]};
      for (const Acc &x : acc)
        yield.append(x.begin(), x.end());
      scf::YieldOp::create(b, loc, yield);
    }
    ValueRange res = loop.getResults();
    SmallVector<Value, 2> total =
        acrossQuarters({rowSum4(res[2]), rowSum4(res[3])},
                       [&](Value x, Value y) { return kb.add(x, y); });
    SmallVector<Acc> acc(nAcc);
    for (int64_t n = 0; n < nAcc; ++n)
      for (int64_t e = 0; e < 4; ++e)
        acc[n][e] = res[4 + 4 * n + e];
    writePartial(item, acc, {res[0], res[1]}, total);
  }

  /// ctx += P latent: P [16, K] from shared memory, the tile's quarter of
  /// the latent channels transposed by ldmatrix.
  void accumulate(SmallVector<Acc> &acc, Value rowBase) {
    auto [ar, ac] = em.ldmatrixLaneA(lane);
    Value prow = kb.addi(kb.muli(th, kb.idx(16)), ar);
    Value c0 = kb.muli(quarter, kb.idx(channelsPerQuarter()));
    for (int64_t k = 0; k < kLatentSplitKeys; k += 16) {
      Value af = em.ldmatrix4(ps, {prow, kb.addi(ac, kb.idx(k))}, false);
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
  Value qs, ks, ps, mx, staging;
};

} // namespace

int64_t mlir::k3::latentSplitAttendSharedBytes(const LatentSplitDims &d,
                                               int64_t cacheBytes) {
  int64_t padded = d.width() + 8;
  bool direct = cacheBytes == 2;
  int64_t buffers = direct ? d.stages : 2;
  int64_t staging = direct ? 0 : cacheBytes * kLatentSplitKeys * d.width();
  return 2 * d.headsPerBlock * padded +
         2 * buffers * kLatentSplitKeys * padded +
         2 * d.headsPerBlock * (kLatentSplitKeys + 8) +
         4 * d.headsPerBlock * 4 + staging;
}

void mlir::k3::emitLatentSplitAttend(const LatentSplitAttendArgs &a) {
  AttendKernel(a).emit();
}
