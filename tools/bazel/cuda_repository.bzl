"""Finds the host's CUDA toolkit for Bazel 4 without downloads (see tools/bazel/cuda.bzl).

Contract: `cuda_repository(name = "cuda")` always succeeds. When no toolkit is found, @cuda//:defs.bzl
says CUDA_FOUND = False and the CUDA targets of the project are built as empty libraries, so the
CPU build never depends on a toolkit being present.
"""

def _find_cuda(rctx):
    env = rctx.os.environ
    for candidate in [env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), "/usr/local/cuda"]:
        if candidate and rctx.path(candidate + "/bin/nvcc").exists:
            return candidate
    nvcc = rctx.which("nvcc")
    if nvcc != None:
        return str(nvcc.dirname.dirname)
    return None

def _cuda_impl(rctx):
    root = _find_cuda(rctx)
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    if root == None:
        rctx.file("defs.bzl", "CUDA_FOUND = False\nNVCC = \"\"\n")
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl"])
cc_library(name = "cudart")
cc_library(name = "nccl")
""")
        return
    rctx.symlink(root + "/include", "include")
    lib = root + "/lib64"
    if not rctx.path(lib + "/libcudart.so").exists:
        lib = root + "/lib"
    rctx.file("defs.bzl", "CUDA_FOUND = True\nNVCC = \"%s/bin/nvcc\"\n" % root)
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl"])

# The CUDA runtime API headers and library (also CCCL's headers, which have no file extension).
cc_library(
    name = "cudart",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart"],
)

cc_library(
    name = "nccl",
    deps = [":cudart"],
    linkopts = ["-L{lib}", "-lnccl"],
)
""".format(lib = lib))

cuda_repository = repository_rule(
    implementation = _cuda_impl,
    local = True,
    environ = ["CUDA_HOME", "CUDA_PATH", "PATH"],
    doc = "The host's CUDA toolkit (nvcc, cudart, NCCL), or an empty stand-in when there is none.",
)
