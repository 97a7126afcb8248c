// Private to the .k3bin code (artifact_*.cpp): the section tags and
// limits of the format, error helpers, and the validator that the reader
// runs on what it decoded. See docs/artifact-format.md.
#ifndef K3_RT_ARTIFACT_FORMAT_H
#define K3_RT_ARTIFACT_FORMAT_H

#include <cstdio>
#include <string>

#include "k3/artifact.h"

namespace k3 {
namespace artifact {
namespace format {

constexpr uint32_t tag(const char (&s)[5]) {
  return uint32_t(uint8_t(s[0])) | uint32_t(uint8_t(s[1])) << 8 |
         uint32_t(uint8_t(s[2])) << 16 | uint32_t(uint8_t(s[3])) << 24;
}
constexpr uint32_t kTagMeta = tag("META"), kTagSyms = tag("SYMS"),
                   kTagWght = tag("WGHT"), kTagKobj = tag("KOBJ"),
                   kTagBufs = tag("BUFS"), kTagEntr = tag("ENTR"),
                   kTagBlob = tag("BLOB"), kTagTmap = tag("TMAP"),
                   kTagImax = tag("IMAX"), kTagColl = tag("COLL"),
                   kTagShrd = tag("SHRD"), kTagAned = tag("ANED");
constexpr size_t kSectionEntrySize = 24;
constexpr uint32_t kMaxRank = 8;
constexpr uint32_t kMaxDevices = 64;
constexpr uint32_t kMaxArgs = 4096;

inline std::string tagName(uint32_t t) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    char c = char((t >> (8 * i)) & 0xff);
    s += (c >= 32 && c < 127) ? c : '?';
  }
  return s;
}

inline std::string hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)v);
  return buf;
}

/// Where validation failed (a path such as "entries[2].launches[5]") and
/// why.
struct VErr {
  std::string path, msg;
};

/// Every rule of docs/artifact-format.md over a decoded artifact
/// (artifact_validate.cpp); false with `e` at the first broken one.
bool validateArtifact(const Artifact &a, VErr &e);

/// A DimExpr's own rules: c > 0, a symbol in range, a constant as (0, b, 1).
bool checkDimExpr(const DimExpr &d, size_t nsyms, std::string &msg);

/// Sections COLL and SHRD (artifact_validate_partition.cpp): each
/// collective and weight shard, and one size per group.
bool validatePartition(const Artifact &a, VErr &e);
/// Section ANED (artifact_validate_args.cpp): each recorded launch's
/// arguments against what its kernel takes (ArgNeed), after the
/// arguments' own ranges were checked.
bool validateArgNeeds(const Artifact &a, const std::vector<int64_t> &symMax,
                      VErr &e);
/// A launch of kCollectiveObject: (buffer in, buffer out, collective
/// index), each buffer large enough at the symbols' max bounds.
bool validateCollectiveLaunch(const Artifact &a, const Launch &l,
                              const std::vector<int64_t> &symMax,
                              const std::string &lp, const std::string &ln,
                              VErr &e);

} // namespace format
} // namespace artifact
} // namespace k3

#endif // K3_RT_ARTIFACT_FORMAT_H
