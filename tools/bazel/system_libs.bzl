"""Repository rules that bring Debian's system libraries and the LibTorch of the torch wheel into Bazel.

Both rules run on the host at fetch time; nothing is downloaded.
"""

def _split_flags(text):
    return [f for f in text.strip().split(" ") if f]

def _pkg_config_impl(rctx):
    pc = rctx.which("pkg-config")
    if pc == None:
        fail("pkg-config is not installed: run tools/setup.sh")
    res = rctx.execute([pc, "--libs", "--cflags"] + rctx.attr.modules)
    if res.return_code != 0:
        fail("pkg-config %s failed: %s (run tools/setup.sh)" % (" ".join(rctx.attr.modules), res.stderr))
    linkopts = []
    defines = []
    seen = {}
    for flag in _split_flags(res.stdout):
        if flag.startswith("-D"):
            defines.append(flag[2:])
        elif flag.startswith("-I"):
            # Debian's headers live under /usr/include, searched by default.
            continue
        elif flag.startswith("-l") or flag.startswith("-L") or flag.startswith("-Wl") or flag == "-pthread":
            if flag in seen:
                continue
            seen[flag] = True
            linkopts.append(flag)
    linkopts = linkopts + rctx.attr.extra_linkopts
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "lib",
    defines = {defines},
    linkopts = {linkopts},
)
""".format(defines = repr(defines), linkopts = repr(linkopts)))

pkg_config_repository = repository_rule(
    implementation = _pkg_config_impl,
    attrs = {
        "modules": attr.string_list(mandatory = True),
        "extra_linkopts": attr.string_list(),
    },
    local = True,
    doc = "A cc_library //:lib linking the given pkg-config modules.",
)

def _find_python(rctx):
    # Same order as tools/python.sh: $TESSERA_PYTHON, the venv of tools/setup.sh, python3.
    env = rctx.os.environ
    if env.get("TESSERA_PYTHON"):
        return env["TESSERA_PYTHON"]
    venv = rctx.path(env.get("HOME", "/root") + "/.cache/tessera/venv/bin/python3")
    if venv.exists:
        return str(venv)
    python = rctx.which("python3")
    if python == None:
        fail("python3 not found: run tools/setup.sh")
    return str(python)

def _torch_impl(rctx):
    python = _find_python(rctx)
    res = rctx.execute([python, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"])
    if res.return_code != 0:
        fail("the torch wheel is not installed (run tools/setup.sh): " + res.stderr)
    root = res.stdout.strip()
    # Expose torch/include without its google/ folder: the wheel carries protobuf headers of its own,
    # which must never shadow Debian's protobuf headers used by the control plane.
    listing = rctx.execute(["ls", root + "/include"])
    for entry in listing.stdout.strip().split("\n"):
        if entry and entry not in ["google", "pybind11"]:
            rctx.symlink(root + "/include/" + entry, "include/" + entry)
    rctx.symlink(root + "/lib", "lib")
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# LibTorch (CPU part) of the torch wheel; c10d with Gloo is inside libtorch_cpu.
cc_library(
    name = "torch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "include/**/*.inc"]),
    includes = ["include", "include/torch/csrc/api/include"],
    defines = ["USE_C10D_GLOO", "_GLIBCXX_USE_CXX11_ABI=1"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-Wl,--no-as-needed", "-ltorch_cpu", "-lc10", "-Wl,--as-needed", "-lpthread"],
)

# LibTorch's CUDA part. Linked only into binaries that run on GPUs (tessera-rank-cuda, GPU tests):
# loading it costs ~0.15 s and ~350 MB of mapped pages per process even when no GPU is present.
cc_library(
    name = "torch_cuda",
    deps = [":torch", "@cuda//:cudart"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-Wl,--no-as-needed", "-ltorch_cuda", "-lc10_cuda", "-Wl,--as-needed"],
)
""".format(lib = root + "/lib"))

torch_repository = repository_rule(
    implementation = _torch_impl,
    local = True,
    environ = ["TESSERA_PYTHON", "HOME"],
    doc = "LibTorch from the installed torch wheel (found with python3).",
)
