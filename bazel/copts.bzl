"""Compiler flags for braid's own code, in one place (third-party code never sees -Werror)."""

BRAID_COPTS = [
    "-std=c++20",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
    "-fno-strict-aliasing",
]

# Kernels: aggressive optimization; vector ISA picked at run time (target_clones
# in the source), so binaries built here run on any x86-64.
BRAID_KERNEL_COPTS = BRAID_COPTS + ["-O3"]

BRAID_TEST_COPTS = BRAID_COPTS

# Adds `deps_if_cuda` / `srcs_if_cuda` to a target under --config=cuda.
def if_cuda(then, otherwise = []):
    return select({
        "//bazel:cuda_enabled": then,
        "//conditions:default": otherwise,
    })

# `then` unless --define=braid_mpi=0 (the GPU bundle) leaves Open MPI out.
def if_mpi(then, otherwise = []):
    return select({
        "//bazel:mpi_disabled": otherwise,
        "//conditions:default": then,
    })

def cuda_only():
    """target_compatible_with value: the target builds only under --config=cuda."""
    return select({
        "//bazel:cuda_enabled": [],
        "//conditions:default": ["//bazel:cuda_unavailable"],
    })

def braid_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = BRAID_COPTS + copts, **kwargs)

def braid_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = BRAID_COPTS + copts, **kwargs)

def braid_cc_test(name, copts = [], deps = [], **kwargs):
    """A Catch2 test linked with the shared main in //tests:catch_main."""
    native.cc_test(
        name = name,
        copts = BRAID_TEST_COPTS + copts,
        deps = deps + ["//tests:catch_main", "@system//:catch2"],
        **kwargs
    )
