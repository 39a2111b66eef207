"""cuda_library: .cu files compiled by nvcc (sm_90 SASS + compute_90 PTX), under --config=cuda only."""

load("//bazel:copts.bzl", "BRAID_COPTS", "cuda_only")

NVCC = "/usr/local/cuda/bin/nvcc"

NVCC_FLAGS = [
    "-std=c++20",
    "-O3",
    "-ccbin g++",
    "-Xcompiler -fPIC",
    "-Xcompiler -Wall,-Werror",
    "--Werror all-warnings",
    # Hopper SASS, plus PTX so newer cards JIT it.
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-I.",
]

def cuda_library(name, srcs, hdrs = [], deps = [], cu_hdrs = [], visibility = None):
    """Each .cu in srcs becomes a PIC object; the objects plus hdrs form a cc_library.

    cu_hdrs: the workspace headers the .cu files include (nvcc runs in the sandbox).
    """
    objs = []
    for src in srcs:
        obj = src.replace(".cu", ".cu.o")
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs + cu_hdrs,
            outs = [obj],
            cmd = "%s %s -c $(location %s) -o $@" % (NVCC, " ".join(NVCC_FLAGS), src),
            target_compatible_with = cuda_only(),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        copts = BRAID_COPTS,
        deps = deps + ["@cuda//:cudart"],
        target_compatible_with = cuda_only(),
        visibility = visibility,
    )
