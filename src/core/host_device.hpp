#pragma once
// OXM_HD marks functions compiled for the host and, under nvcc, for the device too: the op registry's per-element
// math, the coalesced index arithmetic and the optimizer updates are written once for every backend (and for
// their GPU-free host tests). Includes nothing, so any layer may use it.
#if defined(__CUDACC__)
#define OXM_HD __host__ __device__
#else
#define OXM_HD
#endif
