"""nvcc in Bazel 4: a macro that compiles .cu files with the toolkit found by cuda_repository into a
static archive that cc_* rules link.
"""

load("@cuda//:defs.bzl", "CUDA_FOUND", "NVCC")

# Hopper (H100/H200) machine code plus PTX for newer chips.
CUDA_ARCH_FLAGS = ["-gencode=arch=compute_90,code=[sm_90,compute_90]"]

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], **kwargs):
    """Compiles `srcs` (.cu) with nvcc into lib<name>_cu.a and wraps it as cc_library `name`.

    The .cu files may include project headers (listed in `hdrs`) by their workspace path. They must
    not include LibTorch headers: keep kernels to raw pointers and streams, and put the at::Tensor
    glue in ordinary C++ files.
    """
    if not CUDA_FOUND:
        native.cc_library(name = name, hdrs = hdrs, deps = deps, **kwargs)
        return
    archive = "lib%s_cu.a" % name
    objs = []
    for src in srcs:
        obj = "_cu_objs/%s/%s.o" % (name, src.replace("/", "_"))
        objs.append(obj)
    nvcc_cmd = " ".join([
        NVCC,
        "-std=c++17",
        "-O3",
        "--expt-relaxed-constexpr",
        "-Xcompiler=-fPIC",
        "-I.",
        "-I$(GENDIR)",
    ] + CUDA_ARCH_FLAGS + copts)
    compile = " && ".join([
        "%s -c $(location %s) -o $(@D)/_cu_objs/%s/%s.o" % (nvcc_cmd, src, name, src.replace("/", "_"))
        for src in srcs
    ])
    native.genrule(
        name = name + "_nvcc",
        srcs = srcs + hdrs,
        outs = [archive],
        cmd = "mkdir -p $(@D)/_cu_objs/%s && %s && ar rcs $@ %s" % (
            name,
            compile,
            " ".join(["$(@D)/" + o for o in objs]),
        ),
        message = "nvcc " + name,
    )
    native.cc_library(
        name = name,
        srcs = [archive],
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        linkstatic = True,
        **kwargs
    )
