# The layering check (cmake/check_layers.cmake) on scratch copies of src/ and include/: the copy as it is
# passes; each planted violation fails with a message naming file, line, included header and both layers.
# -DSOURCE_ROOT=<oxmera source root> -DWORK=<scratch dir>
set(checker ${SOURCE_ROOT}/cmake/check_layers.cmake)

function(fresh_copy)
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK}/cmake)
  file(COPY ${SOURCE_ROOT}/src ${SOURCE_ROOT}/include DESTINATION ${WORK})
endfunction()

function(run_checker rc_var out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -DSTAMP=${WORK}/stamp "-DEXTRA_ALLOWED=${extra_allowed}"
                          -P ${checker}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " flat "${out} ${err}")
  set(${rc_var} ${rc} PARENT_SCOPE)
  set(${out_var} "${flat}" PARENT_SCOPE)
endfunction()

# expect_failure(<case> <needle>...): the checker fails and its report contains every needle.
function(expect_failure what)
  run_checker(rc out)
  if(rc EQUAL 0)
    message(FATAL_ERROR "layer check: ${what}: expected a failure, the check passed")
  endif()
  foreach(needle IN LISTS ARGN)
    string(FIND "${out}" "${needle}" at)
    if(at LESS 0)
      message(FATAL_ERROR "layer check: ${what}: the report does not contain '${needle}':\n${out}")
    endif()
  endforeach()
  message(STATUS "layer check: ${what}: refused as expected")
endfunction()

# 1. The tree as it is passes and writes the stamp.
fresh_copy()
run_checker(rc out)
if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/stamp)
  message(FATAL_ERROR "layer check: the unmodified tree fails (${rc}):\n${out}")
endif()

# 2. An include of a higher layer: core includes an nn header (line 3 of the planted file).
file(WRITE ${WORK}/src/core/planted.cpp "// planted by tests/layers/run.cmake\n#include <vector>\n#include \"oxmera/nn/module.hpp\"\n")
expect_failure("upward include"
               "src/core/planted.cpp:3: includes \"oxmera/nn/module.hpp\" (include/oxmera/nn/module.hpp, layer nn)"
               "src/core/planted.cpp is in layer core, below nn")

# 3. tensor reaching for the dispatch interface (what tensor.cpp and factory.cpp did before this check).
fresh_copy()
file(APPEND ${WORK}/src/tensor/factory.cpp "\n#include \"backend/backend.hpp\"\n")
expect_failure("tensor includes the dispatch interface"
               "src/tensor/factory.cpp:" "(src/backend/backend.hpp, layer ops)" "is in layer tensor, below ops")

# 4. A restricted header from a layer above it: io may not include the dispatch interface either.
fresh_copy()
file(WRITE ${WORK}/src/io/planted.cpp "#include \"backend/backend.hpp\"\n")
expect_failure("restricted header"
               "src/io/planted.cpp:1: includes \"backend/backend.hpp\" (src/backend/backend.hpp, layer ops), which only layer(s) ops, backends may include"
               "src/io/planted.cpp is in layer io")

# 5. A file no layer covers.
fresh_copy()
file(WRITE ${WORK}/src/newdir/a.cpp "int a;\n")
expect_failure("file without a layer" "src/newdir/a.cpp: no layer covers this file")

# 6. An allowance nothing needs any more (optimizer.cpp no longer includes the dispatch interface).
fresh_copy()
set(extra_allowed "src/optim/optimizer.cpp|src/backend/backend.hpp|a planted stale allowance")
expect_failure("stale allowance"
               "OXMERA_LAYER_ALLOWED entry \"src/optim/optimizer.cpp|src/backend/backend.hpp\" is no longer needed")

set(extra_allowed "")
file(REMOVE_RECURSE ${WORK})
message(STATUS "layer check: passes the tree, refuses every planted violation")
