#pragma once
// GCC vector types for the hand-vectorised CPU kernels (attention, normalisation), included by the per-ISA kernel
// files: the vector width is the widest one this translation unit's ISA flags allow, so the same source gives
// 16-lane f32 vectors under AVX-512 and 8 under AVX2. GCC and clang both take these types; everything is forced
// inline and lives in the ISA's namespace, so the per-ISA copies never meet.
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

// WideVec is wider than a register (twice the native width for f32): GCC warns that passing such a vector by value
// changes the ABI, which cannot matter for these forced-inline helpers and the kernels' inlined lambdas — so the
// warning is off for the rest of every kernel file that includes this header.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace oxmera::detail::OXM_ISA::simd {

#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;
#endif

// (An attribute on a dependent type is ignored, hence one specialisation per element type.)
template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(kVecBytes)));
  typedef int32_t lane_index __attribute__((vector_size(kVecBytes)));
  // the same lanes widened to f64 (two native vectors; GCC splits the operations)
  typedef double wide __attribute__((vector_size(2 * kVecBytes)));
  typedef float unaligned __attribute__((vector_size(kVecBytes), aligned(4)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(kVecBytes)));
  typedef int64_t lane_index __attribute__((vector_size(kVecBytes)));
  typedef double wide __attribute__((vector_size(kVecBytes)));
  typedef double unaligned __attribute__((vector_size(kVecBytes), aligned(8)));
};
template <class T>
using Vec = typename VecOf<T>::type;
template <class T>
using LaneIndex = typename VecOf<T>::lane_index;  // integers of T's width: a comparison of them selects lanes
template <class T>
using WideVec = typename VecOf<T>::wide;  // Vec<T>'s lanes as f64
template <class T>
using LaneInt = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
template <class T>
constexpr int64_t kLanes = kVecBytes / static_cast<int64_t>(sizeof(T));

template <class T>
[[gnu::always_inline]] inline LaneIndex<T> lane_iota() {
  LaneIndex<T> v{};
  for (int64_t l = 0; l < kLanes<T>; ++l) v[l] = static_cast<LaneInt<T>>(l);
  return v;
}
// v's lanes in the order l ^ w (the butterfly partner at distance w); constant lane maps, as GCC and clang need.
template <class V, int w, size_t... I>
[[gnu::always_inline]] inline V xor_lanes(const V& v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, static_cast<int>(I ^ w)...);
}
// A horizontal reduction of any vector type by an xor butterfly of lane shuffles (log2 of the lanes deep, in
// registers, in a fixed order: a recomputation gets the same bits).
template <class V, int w = 1, class Op>
[[gnu::always_inline]] inline auto reduce_any(V v, Op op) {
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(v[0]));
  if constexpr (w < lanes) {
    v = op(v, xor_lanes<V, w>(v, std::make_index_sequence<static_cast<size_t>(lanes)>{}));
    return reduce_any<V, 2 * w>(v, op);
  } else {
    return v[0];
  }
}
template <class T, class Op>
[[gnu::always_inline]] inline T reduce_lanes(Vec<T> v, Op op) {
  return reduce_any(v, op);
}
template <class V, class Half, size_t... I>
[[gnu::always_inline]] inline Half halves_sum(const V& v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, static_cast<int>(I)...) +
         __builtin_shufflevector(v, v, static_cast<int>(I + sizeof...(I))...);
}
// The sum of v's lanes: halves added first (the upper half of a vector wider than a register is another register, so
// that step is one add, no shuffle), then the butterfly within a register.
template <class V>
[[gnu::always_inline]] inline auto sum_lanes(V v) {
  constexpr size_t lanes = sizeof(V) / sizeof(v[0]);
  if constexpr (lanes > static_cast<size_t>(kVecBytes) / sizeof(v[0])) {
    typedef std::remove_cvref_t<decltype(v[0])> E;
    typedef E Half __attribute__((vector_size(sizeof(V) / 2)));
    return sum_lanes(halves_sum<V, Half>(v, std::make_index_sequence<lanes / 2>{}));
  } else {
    return reduce_any(v, [](V a, V b) { return a + b; });
  }
}
// Loads and stores through an element-aligned vector type, not memcpy: a memcpy store may alias anything (a
// character copy), so the compiler reloads every integer a loop reads from memory after each one; a float vector
// store aliases only floats.
template <class T>
[[gnu::always_inline]] inline Vec<T> vload(const T* p) {
  return *reinterpret_cast<const typename VecOf<T>::unaligned*>(p);
}
template <class T>
[[gnu::always_inline]] inline void vstore(T* p, const Vec<T>& v) {
  *reinterpret_cast<typename VecOf<T>::unaligned*>(p) = v;
}
template <class T>
[[gnu::always_inline]] inline Vec<T> splat(T x) {
  return Vec<T>{} + x;
}
template <class T>
[[gnu::always_inline]] inline WideVec<T> widen(const Vec<T>& v) {
  return __builtin_convertvector(v, WideVec<T>);
}

}  // namespace oxmera::detail::OXM_ISA::simd
