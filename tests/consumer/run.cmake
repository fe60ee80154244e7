# Installs the build tree into a scratch prefix, then configures, builds and runs the consumer against it:
#  1. as is;
#  2. with the CUDA toolkit and every CUDA library hidden (no nvcc on PATH, its directories ignored,
#     CUDAToolkit_ROOT an empty folder): a CUDA-built oxmera links no CUDA library (its backend is the module
#     <libdir>/oxmera/liboxmera_cuda.so, loaded at run time), so it must configure, link and run as a CPU-only one;
#  3. CUDA-built oxmera only: the consumer links no CUDA library, the module was installed, and the consumer run
#     with OXMERA_CUDA_MODULE pointing at the installed module reports cuda:0 available or says why not.
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

file(MAKE_DIRECTORY ${WORK}/no-cuda)
run_step("configure without the CUDA toolkit" ${hidden_env} ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build-no-toolkit
         -G Ninja -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCUDAToolkit_ROOT=${WORK}/no-cuda
         -C ${WORK}/hide-cuda.cmake
         -DOXMERA_CONSUMER_EXPECT_NO_CUDA_TOOLKIT=ON)
run_step("build without the CUDA toolkit" ${hidden_env} ${CMAKE_COMMAND} --build ${WORK}/build-no-toolkit)
run_step("run without the CUDA toolkit" ${WORK}/build-no-toolkit/consumer)

if(WITH_CUDA)
  file(GLOB_RECURSE installed_module ${WORK}/prefix/*/oxmera/liboxmera_cuda.so)
  if(NOT installed_module)
    message(FATAL_ERROR "a CUDA-built oxmera installed no CUDA module (<libdir>/oxmera/liboxmera_cuda.so)")
  endif()
  execute_process(COMMAND readelf -d ${WORK}/build-no-toolkit/consumer OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "readelf -d on the consumer failed (${rc})")
  endif()
  if(dyn MATCHES "NEEDED[^\n]*(libcuda|libcudart|libcublas)")
    message(FATAL_ERROR "the consumer links a CUDA library at load time:\n${dyn}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env OXMERA_CUDA_MODULE=${installed_module}
                          ${WORK}/build-no-toolkit/consumer --cuda-status
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "cuda:0: (available|unavailable: .+)")
    message(FATAL_ERROR "consumer --cuda-status with the installed module failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "CUDA-built oxmera: the consumer links no CUDA library; ${out}")
endif()
message(STATUS "find_package(oxmera) consumer built and ran (also with the CUDA toolkit hidden)")
