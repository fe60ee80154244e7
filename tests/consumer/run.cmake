# Installs the build tree into a scratch prefix, then configures, builds and runs the consumer against it:
#  1. as is;
#  2. with the CUDA toolkit hidden (no nvcc on PATH, its directories ignored, CUDAToolkit_ROOT elsewhere): a
#     CUDA-built oxmera must still configure, link and run with only the CUDA runtime libraries (symlinked into a
#     scratch "runtime-only" directory, versioned names only), a CPU-only oxmera with nothing at all;
#  3. CUDA-built oxmera only: with no CUDA libraries anywhere, configuring fails with the message that says what
#     to install or to build with -DOXMERA_CUDA=OFF.
# -DBUILD_DIR= -DSRC= -DWORK= [-DWITH_CUDA=ON -DCUDA_COMPILER=<nvcc> -DCUDA_LIBRARY_DIR=<dir of libcudart>]
file(REMOVE_RECURSE ${WORK})

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer ${what} failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

run_step(install ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/prefix)
run_step(configure ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build -G Ninja -DCMAKE_PREFIX_PATH=${WORK}/prefix)
run_step(build ${CMAKE_COMMAND} --build ${WORK}/build)
run_step(run ${WORK}/build/consumer)

# ---- the toolkit hidden
set(toolkit_roots /usr/local/cuda)
if(CUDA_COMPILER)
  get_filename_component(bin ${CUDA_COMPILER} DIRECTORY)
  get_filename_component(root ${bin} DIRECTORY)
  list(APPEND toolkit_roots ${root})
endif()
set(ignored_dirs ${CUDA_LIBRARY_DIR})
foreach(r IN LISTS toolkit_roots)
  file(REAL_PATH ${r} real)
  foreach(base IN ITEMS ${r} ${real})
    list(APPEND ignored_dirs ${base}/bin ${base}/lib ${base}/lib64 ${base}/targets/x86_64-linux/lib
                             ${base}/targets/x86_64-linux/include ${base}/include)
  endforeach()
  list(APPEND ignored_roots ${r} ${real})
endforeach()
# An nvcc anywhere else (such as a /usr/local/bin/nvcc wrapper) would let FindCUDAToolkit find the toolkit.
string(REPLACE ":" ";" path_dirs "$ENV{PATH}")
foreach(dir IN LISTS path_dirs ITEMS /usr/local/bin /usr/bin /bin)
  if(EXISTS ${dir}/nvcc)
    list(APPEND ignored_dirs ${dir})
  endif()
endforeach()
if(CUDA_LIBRARY_DIR)
  file(REAL_PATH ${CUDA_LIBRARY_DIR} real)
  list(APPEND ignored_dirs ${real})
endif()
list(REMOVE_DUPLICATES ignored_dirs)
list(REMOVE_DUPLICATES ignored_roots)
# Passed as an initial cache (-C): a list on the command line would be split by the argument handling.
file(WRITE ${WORK}/hide-cuda.cmake "set(CMAKE_IGNORE_PATH \"${ignored_dirs}\" CACHE STRING \"\")\n"
                                  "set(CMAKE_IGNORE_PREFIX_PATH \"${ignored_roots}\" CACHE STRING \"\")\n")
set(hidden_env ${CMAKE_COMMAND} -E env PATH=/usr/bin:/bin --unset=CUDA_PATH --unset=CUDAToolkit_ROOT --unset=CUDACXX)

set(runtime_root ${WORK}/cuda-runtime-only)
file(MAKE_DIRECTORY ${runtime_root}/lib64)
if(WITH_CUDA)
  file(GLOB runtime_libraries ${CUDA_LIBRARY_DIR}/libcudart.so.* ${CUDA_LIBRARY_DIR}/libcublas.so.*
       ${CUDA_LIBRARY_DIR}/libcublasLt.so.*)
  foreach(lib IN LISTS runtime_libraries)
    get_filename_component(name ${lib} NAME)
    file(REAL_PATH ${lib} target)
    file(CREATE_LINK ${target} ${runtime_root}/lib64/${name} SYMBOLIC)
  endforeach()
endif()
run_step("configure without the CUDA toolkit" ${hidden_env} ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build-no-toolkit
         -G Ninja -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCUDAToolkit_ROOT=${runtime_root}
         -C ${WORK}/hide-cuda.cmake
         -DOXMERA_CONSUMER_EXPECT_NO_CUDA_TOOLKIT=ON)
run_step("build without the CUDA toolkit" ${hidden_env} ${CMAKE_COMMAND} --build ${WORK}/build-no-toolkit)
run_step("run without the CUDA toolkit" ${WORK}/build-no-toolkit/consumer)

if(WITH_CUDA)
  # CUDAToolkit_ROOT: an empty directory (FindCUDAToolkit ignores a missing one and searches /usr/local/cuda-*).
  file(MAKE_DIRECTORY ${WORK}/no-cuda)
  execute_process(COMMAND ${hidden_env} ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build-no-cuda -G Ninja
                          -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCUDAToolkit_ROOT=${WORK}/no-cuda
                          -C ${WORK}/hide-cuda.cmake
                          -DOXMERA_CONSUMER_EXPECT_NO_CUDA_TOOLKIT=ON
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REPLACE "\n" " " flat "${out} ${err}")
  string(REGEX REPLACE " +" " " flat "${flat}")
  if(rc EQUAL 0)
    message(FATAL_ERROR "consumer configure without any CUDA library succeeded; expected the clear error:\n${out}\n${err}")
  endif()
  foreach(needle IN ITEMS "built with its CUDA backend" "libcudart.so" "libcublas.so" "-DOXMERA_CUDA=OFF")
    string(FIND "${flat}" "${needle}" at)
    if(at LESS 0)
      message(FATAL_ERROR "consumer configure without any CUDA library failed without naming '${needle}':\n${out}\n${err}")
    endif()
  endforeach()
  message(STATUS "without CUDA libraries find_package(oxmera) fails clearly")
endif()
message(STATUS "find_package(oxmera) consumer built and ran (also with the CUDA toolkit hidden)")
