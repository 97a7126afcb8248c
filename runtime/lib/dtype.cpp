#include "k3/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <system_error>
#include <thread>
#include <vector>

namespace k3 {

uint16_t floatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((x >> 16) | 0x40); // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return uint16_t((x + rounding) >> 16);
}

float bf16ToFloat(uint16_t h) {
  uint32_t x = uint32_t(h) << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t floatToF16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u)
    return uint16_t(sign | 0x7e00u); // NaN
  if (absx >= 0x477ff000u)
    return uint16_t(sign | 0x7c00u); // overflow -> inf (>= 65520)
  if (absx < 0x38800000u) {          // subnormal or zero in f16
    // value = absx as float; f16 subnormal unit is 2^-24.
    float a;
    memcpy(&a, &absx, 4);
    float scaled = a * 16777216.0f; // / 2^-24, exact power-of-two scale
    uint32_t m =
        uint32_t(std::nearbyint(scaled)); // default rounding: to nearest even
    return uint16_t(sign |
                    m); // m may be 0x400 which correctly becomes the min normal
  }
  uint32_t exp = ((absx >> 23) - 127 + 15);
  uint32_t mant = absx & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h; // carries into exponent correctly
  return uint16_t(sign | h);
}

float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    float f = float(mant) * (1.0f / 16777216.0f);
    memcpy(&x, &f, 4);
    x |= sign;
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

float loadFloat(artifact::DType t, const void *p, size_t i) {
  const uint8_t *b = static_cast<const uint8_t *>(p);
  if (t == artifact::DType::F32) {
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
  }
  if (t != artifact::DType::BF16 && t != artifact::DType::F16)
    return 0.0f;
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return t == artifact::DType::BF16 ? bf16ToFloat(h) : f16ToFloat(h);
}

bool storeFloat(artifact::DType t, void *p, size_t i, float v) {
  uint8_t *b = static_cast<uint8_t *>(p);
  if (t == artifact::DType::F32) {
    memcpy(b + 4 * i, &v, 4);
    return true;
  }
  if (t != artifact::DType::BF16 && t != artifact::DType::F16)
    return false;
  uint16_t h = t == artifact::DType::BF16 ? floatToBf16(v) : floatToF16(v);
  memcpy(b + 2 * i, &h, 2);
  return true;
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

RandomInitRecipe randomInitRecipe(const artifact::Weight &w, uint64_t seed) {
  using artifact::InitKind;
  RandomInitRecipe r;
  r.base = splitmix64(seed ^ artifact::fnv1a64(w.name.data(), w.name.size()));
  r.kind = w.init.kind;
  r.param = w.init.param;
  if (r.kind == InitKind::Unspecified) {
    bool integer = w.dtype == artifact::DType::I32;
    r.kind = integer ? InitKind::Constant : InitKind::Normal;
    r.param = integer ? 0.0 : 0.02;
  }
  return r;
}

namespace {

/// The E8M0 scale byte of a random MXFP4 weight: uniformly random E2M1
/// codes have an rms of sqrt(8.5625) (the mean square of 0, 0.5, 1, 1.5,
/// 2, 3, 4, 6); the scale is the power of two nearest to bringing that to
/// the recipe's rms (Normal: its std; Uniform(a): a / sqrt(3); Constant:
/// |v|).
uint8_t mxfp4RandomScale(const RandomInitRecipe &r) {
  using artifact::InitKind;
  double rms = r.kind == InitKind::Uniform ? r.param / std::sqrt(3.0)
                                           : std::fabs(r.param);
  if (!(rms > 0.0))
    return 0; // with all-zero codes: zeros
  double e = std::nearbyint(std::log2(rms / std::sqrt(8.5625)));
  return uint8_t(std::min(127.0, std::max(-127.0, e)) + 127.0);
}

/// Bytes [begin, end) of a random MXFP4 weight of `numel` elements: its
/// codes (each byte splitmix64's top 8 bits: two uniform E2M1 codes), then
/// its scales, all equal. A zero-rms recipe gives zero codes.
void randomInitMXFP4Range(const artifact::Weight &w, uint64_t seed, void *out,
                          size_t numel, size_t begin, size_t end) {
  const RandomInitRecipe r = randomInitRecipe(w, seed);
  const uint8_t scale = mxfp4RandomScale(r);
  const size_t codes = numel / 2;
  uint8_t *o = static_cast<uint8_t *>(out);
  for (size_t j = begin; j < end; ++j)
    o[j] = j >= codes ? scale
           : scale    ? uint8_t(splitmix64(r.base + j) >> 56)
                      : 0;
}

/// Elements [begin, end) of randomInit's weight.
void randomInitRange(const artifact::Weight &w, uint64_t seed, void *out,
                     size_t begin, size_t end) {
  using artifact::DType;
  using artifact::InitKind;
  const RandomInitRecipe r = randomInitRecipe(w, seed);
  const uint64_t base = r.base;
  auto u = [&](uint64_t k) {
    return double(splitmix64(base + k) >> 11) * 0x1.0p-53;
  };
  const InitKind kind = r.kind;
  const double param = r.param;
  const double kTwoPi = 6.283185307179586476925286766559;
  for (size_t j = begin; j < end; ++j) {
    double v;
    switch (kind) {
    case InitKind::Normal:
      v = param * std::sqrt(-2.0 * std::log(1.0 - u(2 * j))) *
          std::cos(kTwoPi * u(2 * j + 1));
      break;
    case InitKind::Uniform:
      v = param * (2.0 * u(j) - 1.0);
      break;
    default:
      v = param;
      break;
    }
    float f = float(v);
    switch (w.dtype) {
    case DType::F32:
      static_cast<float *>(out)[j] = f;
      break;
    case DType::BF16:
      static_cast<uint16_t *>(out)[j] = floatToBf16(f);
      break;
    case DType::F16:
      static_cast<uint16_t *>(out)[j] = floatToF16(f);
      break;
    case DType::MXFP4: // randomInit fills it by bytes
      break;
    case DType::I32: {
      double r = std::nearbyint(v);
      if (r > 2147483647.0)
        r = 2147483647.0;
      if (r < -2147483648.0)
        r = -2147483648.0;
      static_cast<int32_t *>(out)[j] = int32_t(r);
      break;
    }
    }
  }
}

} // namespace

void randomInit(const artifact::Weight &w, uint64_t seed, void *out,
                size_t numel, unsigned threads) {
  // MXFP4 is filled by bytes (codes, then scales), the rest by elements.
  const bool mxfp4 = w.dtype == artifact::DType::MXFP4;
  const size_t units = mxfp4 ? artifact::tensorBytes(w.dtype, numel) : numel;
  auto fill = [&w, seed, out, numel, mxfp4](size_t b, size_t e) {
    if (mxfp4)
      randomInitMXFP4Range(w, seed, out, numel, b, e);
    else
      randomInitRange(w, seed, out, b, e);
  };
  // Below a million units one thread is quicker than starting more.
  constexpr size_t kPerThread = size_t(1) << 20;
  if (threads == 0)
    threads = std::max(1u, std::min(64u, std::thread::hardware_concurrency()));
  size_t n = std::min<size_t>(threads, (units + kPerThread - 1) / kPerThread);
  if (n <= 1) {
    fill(0, units);
    return;
  }
  // A range whose thread cannot start is filled here; every thread started
  // is joined (a joinable std::thread destroyed would end the process).
  std::vector<std::thread> pool;
  size_t chunk = (units + n - 1) / n;
  for (size_t t = 0; t < n; ++t) {
    size_t b = t * chunk, e = std::min(units, b + chunk);
    if (b >= e)
      continue;
    try {
      pool.emplace_back(fill, b, e);
    } catch (const std::system_error &) {
      fill(b, e);
    }
  }
  for (std::thread &t : pool)
    t.join();
}

} // namespace k3
