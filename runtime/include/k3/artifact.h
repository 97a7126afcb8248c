// k3/artifact.h - the .k3bin artifact: in-memory model, writer (Builder) and
// validating reader. No MLIR/LLVM dependency; the compiler (k3-opt) links the
// `k3artifact` library to emit artifacts, the runtime links it to read them.
// The byte layout is specified in docs/artifact-format.md.
//
// This header does not require exceptions or RTTI: every fallible call returns
// bool and fills a one-line error message.
#ifndef K3_ARTIFACT_H
#define K3_ARTIFACT_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace k3 {
namespace artifact {

// "K3BIN\r\n\x1a": catches text-mode mangling like PNG's magic does.
constexpr char kMagic[8] = {'K', '3', 'B', 'I', 'N', '\r', '\n', '\x1a'};
constexpr uint32_t kVersionMajor = 1; // incompatible changes bump this
constexpr uint32_t kVersionMinor = 4; // additive (new optional sections)
constexpr size_t kHeaderSize = 64;
constexpr const char *kCallingConvention = "bare-pointer packed params v1";
// Metadata keys with a defined meaning (all values are strings).
constexpr const char *kMetaCallingConvention = "calling_convention";
constexpr const char *kMetaModelName = "model_name";
constexpr const char *kMetaConfigJson = "config_json";
constexpr const char *kMetaVocabSize = "vocab_size";
constexpr const char *kMetaMaxTokens = "max_tokens";
constexpr const char *kMetaMaxSeqs = "max_seqs";
// Entries compiled for at most one token per sequence (comma-separated
// names): their kernels update the decode state in place on that promise,
// and the runtime refuses a call that breaks it.
constexpr const char *kMetaOneTokenEntries = "one_token_entries";
// "1" where every GPU kernel starts with griddepcontrol.wait (the
// k3-grid-dependency-control pass): the runtime may then launch them with
// programmatic stream serialization, overlapping each kernel's launch with
// the previous one's end.
constexpr const char *kMetaGridDependencyControl = "grid_dependency_control";
// A symbol the runtime sets from the device rather than from the caller:
// its streaming multiprocessors (1 on the CPU).
constexpr const char *kSymbolDeviceSMCount = "device_sm_count";
// Kernel object targets understood by the runtime.
constexpr const char *kTargetCpuX86_64 = "cpu-x86_64";
constexpr const char *kTargetCudaSm90a = "cuda-sm_90a";

// MXFP4 (weights only): OCP MX E2M1 codes, two a byte, then one E8M0 scale
// byte per 32 elements of the last dimension (docs/mxfp4.md); it has no
// per-element size, so dtypeSize is 0 and tensorBytes gives its bytes.
enum class DType : uint8_t { BF16 = 0, F16 = 1, F32 = 2, I32 = 3, MXFP4 = 4 };
constexpr uint8_t kNumDTypes = 5;
size_t dtypeSize(DType t);      // bytes per element; 0 for mxfp4
bool dtypeIsInteger(DType t);   // i32
const char *dtypeName(DType t); // "bf16", "f16", "f32", "i32", "mxfp4"
bool parseDType(const std::string &s, DType &out);
/// Bytes of `numel` elements of `t`: mxfp4 numel / 2 codes + numel / 32
/// scales (numel a multiple of 32, which the validator checks).
uint64_t tensorBytes(DType t, uint64_t numel);
constexpr uint64_t kMXFP4Block = 32;

// A dimension: a constant, or ceil_div(a * sym + b, c) over a runtime symbol.
constexpr uint32_t kNoSymbol = 0xFFFFFFFFu;
struct DimExpr {
  uint32_t sym = kNoSymbol; // symbol index, or kNoSymbol for a constant
  int64_t a = 0, b = 0, c = 1;
  static DimExpr constant(int64_t v) { return DimExpr{kNoSymbol, 0, v, 1}; }
  static DimExpr symbol(uint32_t s, int64_t a = 1, int64_t b = 0,
                        int64_t c = 1) {
    return DimExpr{s, a, b, c};
  }
  bool isConstant() const { return sym == kNoSymbol; }
  bool operator==(const DimExpr &o) const {
    return sym == o.sym && a == o.a && b == o.b && c == o.c;
  }
};
// Evaluates `d` given the values of all symbols. Fails (with err) on
// overflow, c <= 0 or a symbol index out of range.
bool evalDim(const DimExpr &d, const int64_t *symValues, size_t numSymbols,
             int64_t &out, std::string &err);
std::string dimToString(const DimExpr &d,
                        const std::vector<std::string> &symNames);

struct Symbol {
  std::string name;     // e.g. "num_tokens", "num_seqs"
  int64_t maxValue = 0; // inclusive upper bound; values are in [0, max]
  bool operator==(const Symbol &o) const {
    return name == o.name && maxValue == o.maxValue;
  }
};

enum class InitKind : uint8_t {
  Unspecified = 0,
  Normal = 1,
  Uniform = 2,
  Constant = 3
};
struct WeightInit {
  InitKind kind = InitKind::Unspecified;
  double param = 0.0; // Normal: std; Uniform: half-width; Constant: value
  static WeightInit normal(double std) { return {InitKind::Normal, std}; }
  static WeightInit uniform(double a) { return {InitKind::Uniform, a}; }
  static WeightInit constant(double v) { return {InitKind::Constant, v}; }
  bool operator==(const WeightInit &o) const {
    return kind == o.kind && param == o.param;
  }
};

struct Weight {
  std::string name; // safetensors tensor name
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  WeightInit init;
  uint32_t device = 0;
  bool operator==(const Weight &o) const {
    return name == o.name && dtype == o.dtype && shape == o.shape &&
           init == o.init && device == o.device;
  }
};
// Bytes of a weight: tensorBytes of its dtype and element count.
uint64_t weightBytes(const Weight &w);

struct KernelObject {
  std::string target; // "cpu-x86_64" (ELF .so) or "cuda-sm_90a" (cubin)
  std::vector<uint8_t> data;
  std::vector<std::string> symbols; // kernel entry points it defines
  bool operator==(const KernelObject &o) const {
    return target == o.target && data == o.data && symbols == o.symbols;
  }
};

enum class BufferKind : uint8_t {
  Arena = 0,  // activation scratch at arenaOffset inside the device arena
  Input = 1,  // bound to an entry input; own allocation
  Output = 2, // bound to an entry output; own allocation
  State = 3,  // persistent across calls; size = perSeqStride * slots
};
constexpr uint32_t kBufferFlagDump = 1u; // include in --dump output
constexpr uint64_t kArenaAlignment = 16; // arenaOffset must be a multiple

struct Buffer {
  std::string name;
  BufferKind kind = BufferKind::Arena;
  uint64_t size = 0;         // bytes, sized for the symbols' max bounds
  uint64_t arenaOffset = 0;  // Arena only
  uint64_t perSeqStride = 0; // State only (0 = not per sequence)
  uint32_t device = 0;
  uint32_t flags = 0;
  bool operator==(const Buffer &o) const {
    return name == o.name && kind == o.kind && size == o.size &&
           arenaOffset == o.arenaOffset && perSeqStride == o.perSeqStride &&
           device == o.device && flags == o.flags;
  }
};

enum class ArgKind : uint8_t {
  Buffer = 0,
  Weight = 1,
  I32 = 2,
  I64 = 3,
  F32 = 4,
  Symbol = 5,
  TensorMap = 6 // index: a TensorMapSpec in Artifact::tensorMaps (1.1)
};
const char *argKindName(ArgKind k); // "buffer", "weight", ..., "tensor map"
struct Arg {
  ArgKind kind = ArgKind::I64;
  uint32_t index =
      0; // Buffer: buffer id; Weight: manifest index; Symbol: symbol index
  uint64_t offset = 0; // Buffer: byte offset into the buffer
  int64_t imm = 0;     // I32 / I64 immediate
  float fimm = 0.0f;   // F32 immediate
  static Arg buffer(uint32_t id, uint64_t off = 0) {
    Arg r;
    r.kind = ArgKind::Buffer;
    r.index = id;
    r.offset = off;
    return r;
  }
  static Arg weight(uint32_t idx) {
    Arg r;
    r.kind = ArgKind::Weight;
    r.index = idx;
    return r;
  }
  static Arg i32(int32_t v) {
    Arg r;
    r.kind = ArgKind::I32;
    r.imm = v;
    return r;
  }
  static Arg i64(int64_t v) {
    Arg r;
    r.kind = ArgKind::I64;
    r.imm = v;
    return r;
  }
  static Arg f32(float v) {
    Arg r;
    r.kind = ArgKind::F32;
    r.fimm = v;
    return r;
  }
  static Arg symbol(uint32_t s) {
    Arg r;
    r.kind = ArgKind::Symbol;
    r.index = s;
    return r;
  }
  // A CUtensorMap encoded by the runtime from Artifact::tensorMaps[id]; the
  // kernel receives the u64 device address of the 64-byte aligned map.
  static Arg tensorMap(uint32_t id) {
    Arg r;
    r.kind = ArgKind::TensorMap;
    r.index = id;
    return r;
  }
  bool operator==(const Arg &o) const;
};

// A TMA tensor map (CUDA CUtensorMap, cuTensorMapEncodeTiled) over a global
// tensor, encoded by the runtime for each run's symbol values and passed to
// kernels through ArgKind::TensorMap arguments.
constexpr uint32_t kMaxTensorMapRank = 5;
constexpr uint32_t kMaxTensorMapBox = 256;
struct TensorMapSpec {
  Arg source; // Arg::buffer(id, byteOffset) or Arg::weight(index)
  DType dtype = DType::BF16; // bf16, f16, f32 or i32
  uint32_t rank = 0;         // 1..5
  // rank sizes in elements, innermost (contiguous) first, as CUDA orders them
  std::vector<DimExpr> dims;
  // rank-1 byte strides of dims 1..rank-1 (multiples of 16)
  std::vector<DimExpr> strides;
  std::vector<uint32_t> box; // rank box sizes in elements, each 1..256
  uint8_t swizzle = 0;       // 0 none, 1 32B, 2 64B, 3 128B
  uint8_t interleave = 0;    // 0 none (the only value accepted for now)
  uint8_t l2Promotion = 0;   // 0 none, 1 64B, 2 128B, 3 256B
  uint8_t oobFill = 0;       // 0 zeros, 1 NaN (float dtypes only)
  bool operator==(const TensorMapSpec &o) const {
    return source == o.source && dtype == o.dtype && rank == o.rank &&
           dims == o.dims && strides == o.strides && box == o.box &&
           swizzle == o.swizzle && interleave == o.interleave &&
           l2Promotion == o.l2Promotion && oobFill == o.oobFill;
  }
};

// cuTensorMapEncodeTiled's rules on evaluated values: dims[k] in 1..2^32,
// strides multiples of 16 below 2^40, strides[0] >= dims[0] * element size
// and strides[k] >= strides[k-1] * dims[k] (dims and strides as in the spec:
// rank dims, rank-1 strides). `what` prefixes the error.
bool checkTensorMapValues(const TensorMapSpec &t, const uint64_t *dims,
                          const uint64_t *strides, const std::string &what,
                          std::string &err);

// What a launch's kernel takes through one argument (section ANED, 1.4,
// optional): the argument's kind and, for a buffer or a weight, the bytes
// the kernel may touch from the argument's address, as an expression of
// the symbols (0: not checked). The validator holds every argument to it,
// so that a launch table naming another, smaller buffer, or a symbol where
// a pointer belongs, is rejected before anything runs.
//
// `input` (the record's first pad byte since 2026-12-05; readers before
// ignore it): 1 + the index of the entry input the argument must be, for an
// argument the compiler bound to an entry input (0: any buffer). Kernels
// read indices from inputs the runtime checks (cu_seqlens, context_lens,
// token_ids); a launch table re-bound to another buffer of enough bytes
// would pass the byte check and let them index out of bounds.
//
// `access` (the record's second pad byte since 2026-12-06; readers before
// ignore it): how the kernel uses a buffer argument (ArgAccess). A launch
// graph runs two launches side by side only where neither writes bytes
// that the other touches (launch_lanes.h); 0, not recorded, counts as
// written.
enum class ArgAccess : uint8_t {
  Unknown = 0, // not recorded: may read and write
  Read = 1,    // only read (an operand of the launch)
  Written = 2, // written, and maybe read (a result, or state in place)
};
struct ArgNeed {
  ArgKind kind = ArgKind::I64;
  DimExpr bytes = DimExpr::constant(0);
  uint8_t input = 0;
  ArgAccess access = ArgAccess::Unknown;
  bool operator==(const ArgNeed &o) const {
    return kind == o.kind && bytes == o.bytes && input == o.input &&
           access == o.access;
  }
};

struct Launch {
  uint32_t object = 0; // kernel object index
  std::string kernel;  // symbol name, must be listed by the object
  DimExpr grid[3] = {DimExpr::constant(1), DimExpr::constant(1),
                     DimExpr::constant(1)};
  DimExpr block[3] = {DimExpr::constant(1), DimExpr::constant(1),
                      DimExpr::constant(1)};
  DimExpr sharedMemBytes = DimExpr::constant(0);
  uint32_t device = 0;
  std::vector<Arg> args;
  std::vector<ArgNeed> needs; // one per arg, or none (not recorded)
  bool operator==(const Launch &o) const;
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<DimExpr> shape;
  uint32_t buffer = 0; // buffer id holding the data (Input/Output/State/Arena)
  // An upper bound on the values of an integer entry input (section IMAX,
  // 1.2; from the argument attribute `k3.max_value`): every element must be
  // <= maxValue (>= 0), and the runtime refuses a run that breaks it before
  // any launch, quoting maxValueReason (`k3.max_value_reason`; a reason
  // needs a bound). Inputs only; none on outputs.
  std::optional<int64_t> maxValue;
  std::string maxValueReason;
  bool operator==(const TensorSpec &o) const {
    return name == o.name && dtype == o.dtype && shape == o.shape &&
           buffer == o.buffer && maxValue == o.maxValue &&
           maxValueReason == o.maxValueReason;
  }
};

// An SPMD program partitioned over ranks (docs/scaling.md): groups of
// ranks that split one axis each. A rank's coordinates are
// rank = tp_rank + tp * (ep_rank + ep * cp_rank); the ranks of one group
// instance differ in that group's coordinate only.
constexpr uint32_t kMaxGroupSize = 64;
bool isGroupName(const std::string &g); // "tp", "ep" or "cp"

// Section COLL (1.3): the collectives an entry runs between its kernels.
// A launch whose object is kCollectiveObject is collective
// collectives[args[2].imm] from buffer args[0] into buffer args[1] (its
// kernel name empty, grid and block unused). In elements of `dtype`:
//   all_reduce:     input and output [outer, chunk];
//   all_gather:     input [outer, chunk], output [outer, groupSize, chunk];
//   reduce_scatter: input [outer, groupSize, chunk], output [outer, chunk]
//                   (rank r of the group keeps slot r).
// Reductions add in rank order, in f32 for bf16 and f16, so that every
// rank and every run gets the same bits.
constexpr uint32_t kCollectiveObject = 0xFFFFFFFFu;
enum class CollectiveKind : uint8_t {
  AllReduce = 0,
  AllGather = 1,
  ReduceScatter = 2,
  // Split and concatenated along one dimension: each rank's [outer, chunk]
  // input is [outer, n, chunk / n] shards; shard j goes to member j, which
  // places it at slot j of the same layout (chunk a multiple of n).
  AllToAll = 3
};
enum class ReduceOp : uint8_t { Sum = 0, Max = 1 };
const char *collectiveName(CollectiveKind k); // "all_reduce", ...
struct Collective {
  CollectiveKind kind = CollectiveKind::AllReduce;
  ReduceOp reduce = ReduceOp::Sum;
  DType dtype = DType::F32;
  std::string group; // "tp", "ep" or "cp"
  uint32_t groupSize = 1;
  DimExpr outer = DimExpr::constant(1), chunk = DimExpr::constant(1);
  bool operator==(const Collective &o) const {
    return kind == o.kind && reduce == o.reduce && dtype == o.dtype &&
           group == o.group && groupSize == o.groupSize && outer == o.outer &&
           chunk == o.chunk;
  }
};

// Section SHRD (1.3): weight `weight` is this rank's slice of a checkpoint
// tensor `extent` long along `dim`: rank r of `group` holds elements
// [r n, (r + 1) n) there, n the manifest's (local) size. Usually extent =
// parts n; a longer tensor is one whose tail no rank reads (K3 pads A_log
// to 128 entries of which the first H are used).
struct WeightShard {
  uint32_t weight = 0;
  uint32_t dim = 0;
  std::string group;
  uint32_t parts = 1;
  uint64_t extent = 0;
  bool operator==(const WeightShard &o) const {
    return weight == o.weight && dim == o.dim && group == o.group &&
           parts == o.parts && extent == o.extent;
  }
};

// The group sizes an artifact's collectives and shards name (1 for a group
// none names); the validator checks that each group has one size.
struct Partition {
  uint32_t tp = 1, ep = 1, cp = 1;
  uint32_t world() const { return tp * ep * cp; }
  uint32_t size(const std::string &group) const;
  /// The rank's coordinate in `group`.
  uint32_t rankIn(const std::string &group, uint32_t rank) const;
  /// The world rank of member `member` of the instance of `group` that
  /// holds `rank`.
  uint32_t memberRank(const std::string &group, uint32_t rank,
                      uint32_t member) const;
};
struct Artifact;
struct Entry;
Partition partitionOf(const Artifact &a);
/// Entry inputs named `k3.rank.<group>` (tensor<1xi32>) are filled by the
/// runtime with each rank's coordinate in the group (expert parallelism,
/// docs/scaling.md), never by the caller. True for such a name, with its
/// group.
bool isRankInput(const std::string &name, std::string *group = nullptr);
/// Whether the artifact lists `entry` as compiled for at most one token per
/// sequence (metadata one_token_entries: the decode entry).
bool isOneTokenEntry(const Artifact &a, const std::string &entry);
/// Whether the runtime cuts `e`'s calls into each cp rank's segments of
/// every sequence (k3-partition-context): it reads k3.rank.cp and is not a
/// one-token entry (a decode step runs replicated on the cp ranks).
bool isContextParallelEntry(const Artifact &a, const Entry &e);

struct Entry {
  std::string name; // e.g. "forward"
  std::vector<TensorSpec> inputs, outputs;
  std::vector<Launch> launches; // executed in order
  bool operator==(const Entry &o) const {
    return name == o.name && inputs == o.inputs && outputs == o.outputs &&
           launches == o.launches;
  }
};

struct Artifact {
  uint32_t versionMajor = kVersionMajor, versionMinor = kVersionMinor;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<Symbol> symbols;
  std::vector<Weight> weights;
  std::vector<KernelObject> objects;
  std::vector<Buffer> buffers;
  std::vector<Entry> entries;
  std::vector<TensorMapSpec> tensorMaps; // section TMAP (1.1, optional)
  std::vector<Collective> collectives;   // section COLL (1.3, optional)
  std::vector<WeightShard> weightShards; // section SHRD (1.3, optional)
  // Inputs' value bounds (TensorSpec::maxValue) are in section IMAX (1.2,
  // optional), written only when some input has one.

  const std::string *meta(const std::string &key) const;
  int findSymbol(const std::string &name) const; // -1 if absent
  int findWeight(const std::string &name) const;
  int findEntry(const std::string &name) const;
  int findBuffer(const std::string &name) const;
  bool operator==(const Artifact &o) const;
};

// Checks every cross reference and bound (what the reader enforces after
// decoding). Errors name the field, e.g. "entries[0]
// 'forward'.launches[2].args[1]: ...".
bool validate(const Artifact &a, std::string &err);

// A human-readable listing (symbols, buffers, weights, tensor maps, every
// entry's launches and arguments): what `k3-run --describe` prints.
std::string describe(const Artifact &a);

// Whole-file I/O shared by the artifact, safetensors and C API code; errors
// name the path ("<path>: cannot open: <reason>", "<path>: read error").
bool readWholeFile(const std::string &path, std::vector<uint8_t> &out,
                   std::string &err);
bool writeWholeFile(const std::string &path, const std::vector<uint8_t> &bytes,
                    std::string &err);

// FNV-1a 64-bit over [data, data+n).
uint64_t fnv1a64(const void *data, size_t n,
                 uint64_t seed = 0xcbf29ce484222325ull);

// Encodes a validated artifact into .k3bin bytes. `skipValidation` exists
// only so tests and fuzzers can produce invalid files for the reader.
bool serialize(const Artifact &a, std::vector<uint8_t> &out, std::string &err,
               bool skipValidation = false);
// Decodes and validates. Errors name the file offset and field.
bool deserialize(const uint8_t *data, size_t size, Artifact &out,
                 std::string &err);
bool readFile(const std::string &path, Artifact &out, std::string &err);
bool writeFile(const std::string &path, const Artifact &a, std::string &err);

// Builder: the API the compiler uses to emit artifacts. Ids returned by add*
// are the indices used in Arg / Launch / TensorSpec.
class Builder {
public:
  Builder(); // sets calling_convention metadata
  void setMetadata(const std::string &key, const std::string &value);
  uint32_t addSymbol(const std::string &name, int64_t maxValue);
  uint32_t addWeight(const std::string &name, DType dtype,
                     std::vector<int64_t> shape, WeightInit init = {},
                     uint32_t device = 0);
  uint32_t addKernelObject(const std::string &target, std::vector<uint8_t> data,
                           std::vector<std::string> symbols);
  uint32_t addBuffer(const std::string &name, BufferKind kind, uint64_t size,
                     uint64_t arenaOffset = 0, uint64_t perSeqStride = 0,
                     uint32_t device = 0, uint32_t flags = 0);
  uint32_t addEntry(const std::string &name);
  // Returns the id for Arg::tensorMap.
  uint32_t addTensorMap(TensorMapSpec spec);
  // A collective launch of `entry` from buffer `in` into buffer `out`.
  uint32_t addCollective(uint32_t entry, Collective c, Arg in, Arg out,
                         uint32_t device = 0);
  void addWeightShard(WeightShard shard);
  // Returns the input's index within the entry.
  uint32_t addInput(uint32_t entry, const std::string &name, DType dtype,
                    std::vector<DimExpr> shape, uint32_t buffer);
  // Bounds the values of input `input` of `entry` (TensorSpec::maxValue).
  void setInputMaxValue(uint32_t entry, uint32_t input, int64_t maxValue,
                        std::string reason);
  void addOutput(uint32_t entry, const std::string &name, DType dtype,
                 std::vector<DimExpr> shape, uint32_t buffer);
  // Returns the launch's index within the entry.
  uint32_t addLaunch(uint32_t entry, Launch launch);
  /// Marks each recorded need of `entry`'s launches whose argument is one of
  /// the entry's inputs with that input (ArgNeed::input); call once its
  /// inputs and launches are in.
  void bindNeedsToInputs(uint32_t entry);
  uint32_t addLaunch(uint32_t entry, uint32_t object, const std::string &kernel,
                     std::vector<Arg> args, const DimExpr (&grid)[3],
                     const DimExpr (&block)[3],
                     DimExpr sharedMemBytes = DimExpr::constant(0),
                     uint32_t device = 0);

  const Artifact &artifact() const { return a_; }
  Artifact &artifact() { return a_; }
  bool serialize(std::vector<uint8_t> &out, std::string &err) const;
  bool writeFile(const std::string &path, std::string &err) const;

private:
  Artifact a_;
};

} // namespace artifact
} // namespace k3

#endif // K3_ARTIFACT_H
