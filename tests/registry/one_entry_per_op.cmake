# Proves that an elementwise op is one registry entry plus its math: `expm1` is a complete op (Tensor method,
# CPU and CUDA kernels, autograd node, f64-reference test, gradcheck, conformance and parity cases), and its
# name and id appear in exactly two files of the tree: include/oxmera/op_registry.hpp (the entry) and
# src/ops/op_defs.hpp (the math). Everything else is generated from, or iterates, the registry.
# Usage: cmake -DROOT=<source dir> -P one_entry_per_op.cmake
# Besides those two, the name may appear where e^x - 1 is the elementary function (not the op): the CPU's
# vectorised libm, src/backend/cpu/vec_math.hpp (VecMath::expm1, which the math of expm1 and elu calls, as
# ops::Math::expm1 calls std::expm1), and its accuracy test.
set(expected_expm1 "include/oxmera/op_registry.hpp;src/backend/cpu/vec_math.hpp;src/ops/op_defs.hpp;tests/test_vec_math.cpp")
set(expected_Expm1 "include/oxmera/op_registry.hpp;src/ops/op_defs.hpp")
file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/src/* ${ROOT}/include/* ${ROOT}/tests/* ${ROOT}/tools/*
     ${ROOT}/bench/* ${ROOT}/examples/* ${ROOT}/scripts/* ${ROOT}/CMakeLists.txt)
list(FILTER files EXCLUDE REGEX "^tests/registry/")
foreach(word expm1 Expm1)
  set(found "")
  foreach(f IN LISTS files)
    file(READ ${ROOT}/${f} text)
    if(text MATCHES "(^|[^A-Za-z0-9_])${word}([^A-Za-z0-9_]|$)")
      list(APPEND found ${f})
    endif()
  endforeach()
  list(SORT found)
  set(expected ${expected_${word}})
  if(NOT found STREQUAL expected)
    message(FATAL_ERROR "'${word}' appears in: ${found}\nexpected exactly: ${expected}\n"
                        "An elementwise op must need only its registry entry and its math; generate or iterate "
                        "the registry instead of naming the op.")
  endif()
endforeach()
message(STATUS "expm1: one registry entry plus its math")
