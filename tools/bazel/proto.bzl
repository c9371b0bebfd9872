"""tessera_proto_library: C++ (and optionally gRPC) code from .proto files with Debian's protoc.

Bazel 4's native proto rules want to download protobuf; a genrule calling /usr/bin/protoc and
grpc_cpp_plugin works offline. Sources are relative to the package; imports are rooted there too.
`proto_deps` are the tessera_proto_library targets whose .proto files `srcs` import.
"""

def tessera_proto_library(name, srcs, proto_deps = [], grpc = False, visibility = None):
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    pkg = native.package_name()
    cmd = "protoc --proto_path=%s --cpp_out=$(GENDIR)/%s" % (pkg, pkg)
    if grpc:
        cmd += " --grpc_out=$(GENDIR)/%s --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)" % pkg
    cmd += " " + " ".join(["$(location %s)" % s for s in srcs])
    native.genrule(
        name = name + "_gen",
        # Every .proto of the package, so that imports resolve; only `srcs` are compiled.
        srcs = srcs + [p for p in native.glob(["**/*.proto"]) if p not in srcs],
        outs = outs,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = proto_deps + ["@protobuf//:lib"] + (["@grpc//:lib"] if grpc else []),
        visibility = visibility,
    )
