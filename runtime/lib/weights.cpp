// Session::loadWeights: a checkpoint's tensors (safetensors files,
// sharded indexes, directories; the hub's names or transformers') checked
// against the manifest, converted to its dtypes and uploaded (staged and
// pipelined: weight_upload.h).
#include "session.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <dirent.h>
#include <map>
#include <optional>
#include <set>
#include <sys/stat.h>

#include "checkpoint_names.h"
#include "k3/safetensors.h"
#include "weight_upload.h"

namespace k3 {
namespace rt {

using namespace artifact;

namespace {

/// Whether a checkpoint tensor of shape `got` holds, row-major, exactly the
/// tensor of shape `want`: equal shapes, equal after dropping unit
/// dimensions (Kimi Linear stores A_log as [1, 1, H, 1]), or a flat `want`
/// of the same size (transformers' dt_bias [H, d] for [H * d]).
bool sameLayout(const std::vector<int64_t> &got,
                const std::vector<int64_t> &want) {
  if (got == want)
    return true;
  auto squeeze = [](const std::vector<int64_t> &s) {
    std::vector<int64_t> r;
    for (int64_t d : s)
      if (d != 1)
        r.push_back(d);
    return r;
  };
  if (squeeze(got) == squeeze(want))
    return true;
  int64_t n = 1;
  for (int64_t d : got)
    n *= d;
  return want.size() == 1 && n == want[0];
}

bool isDirectory(const std::string &p) {
  struct stat sb;
  return stat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
}
bool isFile(const std::string &p) {
  struct stat sb;
  return stat(p.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
}
/// The weight files of a checkpoint directory: its
/// model.safetensors.index.json when present, else every *.safetensors in
/// it (sorted by name).
std::vector<std::string> checkpointFiles(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  std::string index = dir + "/model.safetensors.index.json";
  if (isFile(index))
    return {index};
  std::vector<std::string> files;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0 &&
          isFile(dir + "/" + n))
        files.push_back(dir + "/" + n);
    }
    closedir(d);
  } else {
    fail(K3_ERROR_IO, dir + ": cannot open directory");
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    fail(K3_ERROR_IO, dir +
                          ": checkpoint directory has no "
                          "model.safetensors.index.json and no *.safetensors");
  return files;
}

/// A checkpoint tensor under the name a weight (or one expert's part of
/// it) asked for.
using CheckpointPart = std::pair<std::string, const st::TensorInfo *>;

/// The tensors of a checkpoint (files, sharded indexes, directories) under
/// the names of an artifact's manifest: a weight's own name (or with the
/// `language_model.` prefix of VLM checkpoints), else transformers'
/// name or a slab of one of its fused tensors (checkpoint_names.h).
class CheckpointTensors {
public:
  explicit CheckpointTensors(const std::vector<std::string> &given) {
    std::vector<std::string> paths;
    for (auto &p : given) {
      if (isDirectory(p)) {
        for (auto &f : checkpointFiles(p))
          paths.push_back(f);
      } else {
        paths.push_back(p);
      }
    }
    std::string err;
    for (auto &p : paths) {
      names_ += (names_.empty() ? "" : ", ") + p;
      bool isIndex = p.size() >= 5 && p.compare(p.size() - 5, 5, ".json") == 0;
      bool ok = isIndex ? c_.open(p, err) : c_.addFile(p, err);
      if (!ok)
        fail(err.find("cannot open") != std::string::npos ? K3_ERROR_IO
                                                          : K3_ERROR_FORMAT,
             err);
    }
  }

  /// The files, for errors.
  const std::string &names() const { return names_; }

  const st::TensorInfo *lookup(const std::string &name) {
    auto it = found_.find(name);
    if (it != found_.end())
      return it->second;
    if (const st::TensorInfo *t = find(name))
      return found_[name] = t;
    for (const TensorSlab &src : transformersSources(name)) {
      const st::TensorInfo *fused = find(src.name);
      if (std::optional<st::TensorInfo> slab =
              fused ? slabOf(*fused, src) : std::nullopt) {
        slabs_.push_back(*slab);
        return found_[name] = &slabs_.back();
      }
    }
    return found_[name] = nullptr;
  }

  /// The checkpoint tensors of weight `w` under `name` (`w.name`, or for
  /// MXFP4 its `_packed` or `_scale` form): one, or for a name with the
  /// "{expert}" placeholder one per expert, stacked along the first
  /// dimension.
  /// `firstExpert`: the number of the first (an expert-parallel rank's
  /// experts are a range of the model's).
  std::vector<CheckpointPart> parts(const Weight &w, const std::string &name,
                                    int64_t firstExpert = 0) {
    std::vector<CheckpointPart> out;
    static const std::string kExpert = "{expert}";
    size_t at = name.find(kExpert);
    if (at == std::string::npos) {
      out.push_back({name, lookup(name)});
      return out;
    }
    for (int64_t e = 0; e < (w.shape.empty() ? 0 : w.shape[0]); ++e) {
      std::string n = name.substr(0, at) + std::to_string(firstExpert + e) +
                      name.substr(at + kExpert.size());
      out.push_back({n, lookup(n)});
    }
    return out;
  }

private:
  const st::TensorInfo *find(const std::string &name) const {
    const st::TensorInfo *t = c_.find(name);
    return t ? t : c_.find("language_model." + name);
  }

  st::Collection c_;
  std::string names_;
  std::map<std::string, const st::TensorInfo *> found_;
  std::deque<st::TensorInfo> slabs_; // stable addresses
};

/// What a checkpoint tensor holds of its weight: all of it (in the
/// weight's dtype), or an MXFP4 weight's codes or scales (U8).
enum class PartRole { whole, mxfp4Codes, mxfp4Scales };

/// How errors name a part's storage.
std::string roleName(PartRole role, DType dtype) {
  switch (role) {
  case PartRole::mxfp4Codes:
    return "u8 MXFP4 codes";
  case PartRole::mxfp4Scales:
    return "u8 MXFP4 scales";
  case PartRole::whole:
    break;
  }
  return dtypeName(dtype);
}

/// One checkpoint tensor of a weight, with the shape and dtype it must have
/// and how many elements of the weight's storage (bytes for MXFP4) it fills.
struct WeightPart {
  CheckpointPart source;
  std::vector<int64_t> shape;
  PartRole role = PartRole::whole;
  uint64_t elements = 0;
  /// A rank's slice of the part (a sharded weight): `elements` are the
  /// slice's; none for the whole part.
  std::optional<ShardSlice> slice;
};

/// How a rank holds weight `w` of a partitioned artifact: its shard, if the
/// artifact slices it, and the rank's index in the shard's group.
struct RankShard {
  const WeightShard *shard = nullptr;
  uint32_t index = 0;
};

uint64_t numelOf(const std::vector<int64_t> &shape) {
  uint64_t n = 1;
  for (int64_t d : shape)
    n *= uint64_t(d);
  return n;
}

/// The checkpoint tensors of rank `index`'s shard `s` of weight `w` (one
/// part's `shape`): along the experts of a stacked weight, its range of
/// them; along another dimension, the slice of each whole part.
std::vector<WeightPart> shardParts(const Weight &w, CheckpointTensors &ck,
                                   const WeightShard &s, uint32_t index,
                                   bool stacked, std::vector<int64_t> shape) {
  uint64_t numel = numelOf(shape);
  std::vector<WeightPart> out;
  if (stacked && s.dim == 0) {
    for (CheckpointPart &p : ck.parts(w, w.name, int64_t(index) * w.shape[0]))
      out.push_back({p, shape, PartRole::whole, numel, std::nullopt});
    return out;
  }
  Weight part = w;
  part.shape = shape;
  WeightShard partShard = s;
  partShard.dim = stacked ? s.dim - 1 : s.dim;
  ShardSlice slice = shardSlice(part, partShard, index);
  std::vector<int64_t> whole = shape;
  whole[partShard.dim] = int64_t(s.extent);
  for (CheckpointPart &p : ck.parts(w, w.name))
    out.push_back({p, whole, PartRole::whole, numel, slice});
  return out;
}

/// Elements [first, first + count) of a sliced part, converted from its
/// checkpoint tensor run by run.
bool convertSlice(const st::TensorInfo &t, DType dtype, const ShardSlice &s,
                  uint64_t first, uint64_t count, void *out, std::string &e) {
  uint8_t *o = static_cast<uint8_t *>(out);
  // MXFP4's parts (codes, scales) are U8: a byte an element.
  size_t bytes = dtype == DType::MXFP4 ? 1 : dtypeSize(dtype);
  while (count) {
    uint64_t run = first / s.localInner, k = first % s.localInner;
    uint64_t n = std::min(count, s.localInner - k);
    if (!st::convertRange(t, dtype, run * s.fullInner + s.offset + k, n, o, e))
      return false;
    o += n * bytes;
    first += n;
    count -= n;
  }
  return true;
}

/// An MXFP4 weight's parts (`shape`: one part's, the rank's): the codes
/// `<name>_packed` [.., in / 2], then the scales `<name>_scale` [.., in /
/// 32], both U8. A stack split by expert (EP) reads its rank's experts; a
/// split along another dimension (TP) slices each part's codes and scales
/// (along the inputs, in whole scale blocks: the validator's rule).
std::vector<WeightPart> mxfp4Parts(const Weight &w, CheckpointTensors &ck,
                                   RankShard rs, bool stacked,
                                   const std::vector<int64_t> &shape) {
  bool byExpert = rs.shard && stacked && rs.shard->dim == 0;
  int64_t firstExpert = byExpert ? int64_t(rs.index) * w.shape[0] : 0;
  std::optional<WeightShard> within;
  if (rs.shard && !byExpert) {
    within = *rs.shard;
    within->dim -= stacked ? 1 : 0;
  }
  std::vector<WeightPart> out;
  auto add = [&](const std::string &name, uint64_t per, PartRole role) {
    Weight local;
    local.dtype = DType::MXFP4;
    local.shape = shape;
    std::vector<int64_t> bytes = shape, whole;
    bytes.back() /= int64_t(per);
    std::optional<ShardSlice> slice;
    if (within) {
      slice = mxfp4RegionSlice(local, *within, rs.index, per);
      whole = bytes;
      whole[within->dim] =
          int64_t(within->dim + 1 == shape.size() ? within->extent / per
                                                  : within->extent);
    }
    uint64_t n = numelOf(bytes);
    for (CheckpointPart &p : ck.parts(w, name, firstExpert))
      out.push_back({p, within ? whole : bytes, role, n, slice});
  };
  add(w.name + "_packed", 2, PartRole::mxfp4Codes);
  add(w.name + "_scale", kMXFP4Block, PartRole::mxfp4Scales);
  return out;
}

/// The checkpoint tensors of weight `w`, in storage order: its parts (one,
/// or one per expert); for MXFP4 the `<name>_packed` parts [.., in / 2]
/// then the `<name>_scale` parts [.., in / 32], both U8 (the checkpoint's
/// compressed-tensors layout, docs/mxfp4.md).
std::vector<WeightPart> weightParts(const Weight &w, CheckpointTensors &ck,
                                    RankShard rs = {}) {
  bool stacked = w.name.find("{expert}") != std::string::npos;
  std::vector<int64_t> shape =
      stacked ? std::vector<int64_t>(w.shape.begin() + 1, w.shape.end())
              : w.shape;
  if (w.dtype != DType::MXFP4) {
    if (rs.shard)
      return shardParts(w, ck, *rs.shard, rs.index, stacked, shape);
    std::vector<WeightPart> out;
    for (CheckpointPart &p : ck.parts(w, w.name))
      out.push_back({p, shape, PartRole::whole, numelOf(shape), std::nullopt});
    return out;
  }
  return mxfp4Parts(w, ck, rs, stacked, shape);
}

/// Every weight of the manifest is in the checkpoint, each part with the
/// manifest's layout: checked before any device memory is touched.
void checkCheckpoint(const Artifact &a, CheckpointTensors &ck,
                     const std::function<RankShard(size_t)> &shardOf) {
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const Weight &w = a.weights[i];
    for (const WeightPart &part : weightParts(w, ck, shardOf(i))) {
      auto &[n, t] = part.source;
      std::string kind = roleName(part.role, w.dtype);
      if (!t)
        fail(K3_ERROR_WEIGHTS, "weight '" + n + "' (" + kind + " " +
                                   shapeString(part.shape) + ") not found in " +
                                   ck.names());
      std::string as = t->name == n || t->name == "language_model." + n
                           ? ""
                           : " (as '" + t->name + "')";
      if (!sameLayout(t->shape, part.shape))
        fail(K3_ERROR_WEIGHTS, "weight '" + n + "'" + as + " has shape " +
                                   shapeString(t->shape) + " in " + t->file +
                                   " but the artifact expects " +
                                   shapeString(part.shape));
      if (part.role != PartRole::whole && t->dtype != "U8")
        fail(K3_ERROR_WEIGHTS, "weight '" + n + "'" + as + " has dtype " +
                                   t->dtype + " in " + t->file + " but " +
                                   kind.substr(3) + " are U8");
    }
  }
}

/// Where weight `w` goes (device address `device`) and how its checkpoint
/// parts lie in it: end to end.
UploadTarget uploadTarget(const Weight &w, uint64_t device,
                          const std::vector<WeightPart> &parts) {
  UploadTarget t;
  t.name = w.name;
  t.device = device;
  t.elementBytes = w.dtype == DType::MXFP4 ? 1 : dtypeSize(w.dtype);
  for (const WeightPart &p : parts)
    t.partElements.push_back(p.elements);
  return t;
}

/// An E8M0 scale byte of 0xFF is NaN: a checkpoint holding one is refused
/// rather than loaded as NaN weights.
bool checkScales(const WeightPart &part, const UploadPiece &piece,
                 const void *out, std::string &err) {
  if (part.role != PartRole::mxfp4Scales)
    return true;
  const uint8_t *s = static_cast<const uint8_t *>(out);
  for (uint64_t k = 0; k < piece.count; ++k)
    if (s[k] == 0xFF) {
      err = "weight '" + part.source.first + "': scale " +
            std::to_string(piece.first + k) +
            " is 0xFF (NaN in E8M0); a valid MXFP4 scale is 0..254";
      return false;
    }
  return true;
}

} // namespace

WeightLoadStats
Session::loadWeights(const std::vector<std::string> &given,
                     const std::function<void(uint64_t, uint64_t)> &progress) {
  if (leadsRanks()) {
    WeightLoadStats stats;
    forEachRank([&](Session &s) {
      WeightLoadStats st = s.loadWeights(
          given,
          &s == this ? progress : std::function<void(uint64_t, uint64_t)>());
      if (&s == this)
        stats = st;
    });
    return stats;
  }
  auto start = std::chrono::steady_clock::now();
  if (given.empty())
    fail(K3_ERROR_INVALID_ARGUMENT, "no weight files given");
  CheckpointTensors ck(given);
  const Artifact &a = *art_;
  auto rankShard = [&](size_t i) {
    const WeightShard *s = shardOf(i);
    return RankShard{s, s ? partition_.rankIn(s->group, rank_) : 0};
  };
  checkCheckpoint(a, ck, rankShard);
  UploadOptions opt;
  std::string err;
  if (!uploadThreads(opt.threads, err))
    fail(K3_ERROR_INVALID_ARGUMENT, err);
  opt.progress = progress;
  // Every destination is allocated before the first copy, and none counts
  // as loaded until all are.
  WeightLoadStats stats;
  std::vector<std::vector<WeightPart>> sources(a.weights.size());
  std::vector<UploadTarget> targets;
  std::set<std::string> files;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    allocWeight(i);
    weightLoaded_[i] = false;
    sources[i] = weightParts(a.weights[i], ck, rankShard(i));
    targets.push_back(uploadTarget(a.weights[i], weightPtr_[i], sources[i]));
    for (const WeightPart &part : sources[i])
      files.insert(part.source.second->file);
    stats.bytes += weightBytes(a.weights[i]);
  }
  FillFn fill = [&](const UploadPiece &p, void *out, std::string &e) {
    const WeightPart &part = sources[p.target][p.part];
    DType dtype = a.weights[p.target].dtype;
    if (!(part.slice ? convertSlice(*part.source.second, dtype, *part.slice,
                                    p.first, p.count, out, e)
                     : st::convertRange(*part.source.second, dtype, p.first,
                                        p.count, out, e))) {
      e = "weight '" + part.source.first + "': " + e;
      return false;
    }
    return checkScales(part, p, out, e);
  };
  switch (uploadTargets(*be_, targets, fill, opt, err)) {
  case UploadStatus::FillFailed:
    fail(K3_ERROR_WEIGHTS, err);
  case UploadStatus::DeviceFailed:
    fail(K3_ERROR_DEVICE, "uploading weights to " + be_->name() + ": " + err);
  case UploadStatus::Ok:
    break;
  }
  std::fill(weightLoaded_.begin(), weightLoaded_.end(), true);
  stats.files = files.size();
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return stats;
}

} // namespace rt
} // namespace k3
