# The layers of oxmera, lowest first: a file may include headers of its own layer and of the layers before it in
# this list, never of a later one. This file is the one place the layering is written down: CMakeLists.txt builds
# one object library per library layer from it, cmake/check_layers.cmake enforces it on every build, and
# docs/ARCHITECTURE.md describes the same table.
set(OXMERA_LAYERS core tensor ops backends linalg distributed nn optim io data workloads)
# The layers that make up the public library (workloads is internal: the CLI, tests and benchmarks link it).
set(OXMERA_LIBRARY_LAYERS core tensor ops backends linalg distributed nn optim io data)

# The layer of a file, by its path relative to the source root: the longest matching prefix wins (a prefix
# ending in "/" names a directory, any other an exact file). A file under src/ or include/ that no rule covers
# fails the check: a new directory or public header needs a line here.
set(OXMERA_LAYER_RULES
  # core: dtypes, devices, shapes, errors, intrusive Ref; the declarations of device.hpp, memory.hpp and
  # version.hpp that need a backend (init, memory_stats, build_info) are defined by the backend registry
  "src/core/=core"
  "include/oxmera/dtype.hpp=core"
  "include/oxmera/device.hpp=core"
  "include/oxmera/shape.hpp=core"
  "include/oxmera/error.hpp=core"
  "include/oxmera/version.hpp=core"
  "include/oxmera/memory.hpp=core"
  # tensor: handles, TensorImpl and Storage, constructors, the Generator (defined in src/tensor/factory.cpp)
  "src/tensor/=tensor"
  "include/oxmera/tensor.hpp=tensor"
  "include/oxmera/op_registry.hpp=tensor"  # the op registry: data the Tensor methods are declared from
  "include/oxmera/random.hpp=tensor"
  # ops + autograd: op front ends and the op table, the autograd engine, and the dispatch interface the ops
  # call (src/backend/backend.hpp belongs here, not to the backends that implement it)
  "src/ops/=ops"
  "src/autograd/=ops"
  "include/oxmera/autograd.hpp=ops"
  "include/oxmera/autograd_functional.hpp=ops"
  "include/oxmera/graph.hpp=ops"  # CUDA graphs: capture and replay through the device backend
  "src/backend/backend.hpp=ops"
  # Pure per-element and per-matrix arithmetic (host and device compilable) shared by the backends and by the
  # fused ops' composite fallbacks of the ops layer.
  "src/backend/common/=ops"
  # backends: the registry and the implementations (cpu/, cuda/)
  "src/backend/=backends"
  # linalg / einsum: einsum is lowered to ordinary ops (diagonal, sum, permute, batched matmul), like linalg's
  # compositions, so it sits with linalg above the backends rather than among the op front ends
  "src/linalg/=linalg"
  "src/ops/einsum.cpp=linalg"
  "include/oxmera/linalg.hpp=linalg"
  "include/oxmera/einsum.hpp=linalg"
  # distributed: process groups and collectives over MPI (tensor ops only; below nn, whose data-parallel
  # wrapper will use it)
  "src/distributed/=distributed"
  "include/oxmera/distributed.hpp=distributed"
  # nn
  "src/nn/=nn"
  "include/oxmera/nn/=nn"
  "include/oxmera/nn.hpp=nn"
  # optim
  "src/optim/=optim"
  "include/oxmera/optim.hpp=optim"
  # io: safetensors, nn::save/load, checkpoints (model + optimizer), data file formats
  "src/io/=io"
  "include/oxmera/io.hpp=io"
  "include/oxmera/checkpoint.hpp=io"
  "include/oxmera/formats.hpp=io"  # IDX, CSV, .npy / .npz, safetensors folders (src/io/format_io.hpp: zlib)
  # data: datasets and the DataLoader (tensor ops only; above io so that a file reader's dataset may use both);
  # the umbrella header includes everything, so it sits in the top library layer
  "src/data/=data"
  "include/oxmera/data/=data"
  "include/oxmera/data.hpp=data"
  "include/oxmera/oxmera.hpp=data"
  # workloads: the research workload and the demo training (internal library, public API only)
  "src/workloads/=workloads")

# Headers only the named layers may include, whatever the order: the dispatch interface has one user, the ops
# layer (one dispatch point), and the backends that implement it. "header=layer,layer".
set(OXMERA_LAYER_RESTRICTED
  "src/backend/backend.hpp=ops,backends")

# Known violations, each with its reason; the check accepts exactly these (file|included header|reason) and
# says so when an entry is no longer needed, so it can be deleted. None today.
set(OXMERA_LAYER_ALLOWED)

# oxmera_layer_of(<path relative to the source root> <out-var>): the layer, or "" when no rule covers the path.
function(oxmera_layer_of path out)
  set(best "")
  set(best_len -1)
  foreach(rule IN LISTS OXMERA_LAYER_RULES)
    string(FIND "${rule}" "=" eq REVERSE)
    string(SUBSTRING "${rule}" 0 ${eq} prefix)
    math(EXPR from "${eq} + 1")
    string(SUBSTRING "${rule}" ${from} -1 layer)
    string(LENGTH "${prefix}" len)
    set(match FALSE)
    if(prefix MATCHES "/$")
      string(FIND "${path}" "${prefix}" at)
      if(at EQUAL 0)
        set(match TRUE)
      endif()
    elseif(path STREQUAL prefix)
      set(match TRUE)
    endif()
    if(match AND len GREATER best_len)
      set(best "${layer}")
      set(best_len ${len})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()
