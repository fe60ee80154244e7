#pragma once
// OXM_CUDA_HD marks functions shared by host code (and its GPU-free unit tests) and nvcc device code.
#if defined(__CUDACC__)
#define OXM_CUDA_HD __host__ __device__
#else
#define OXM_CUDA_HD
#endif
