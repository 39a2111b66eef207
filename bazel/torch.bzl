"""@torch: the torch installed in the project's virtualenv, as Bazel sees it.

tools/setup.sh makes the virtualenv (.venv in the checkout, or $BRAID_VENV) and pip-installs the
pinned torch into it. This rule asks that python for torch's own build facts, the ones
torch.utils.cpp_extension compiles an extension with (include paths, the libstdc++ ABI, the
libraries), so the backend Bazel builds for the tests matches the one `pip install .` builds.

Targets:
  @torch//:torch    headers, defines and libraries of torch's C++ API and c10d
  @torch//:python   bin/python3, a script that runs the virtualenv's python (the tests'
                    interpreter; put its folder first on PATH for `python3`)
"""

_PROBE = """
import sys, sysconfig, torch, torch.utils.cpp_extension as ext
print(torch.__file__.rsplit('/', 1)[0])
print(sysconfig.get_path('include'))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__)
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

# torch {version}, from {torch_dir}
cc_library(
    name = "torch",
    hdrs = glob(["include/**"]) + glob(["python_include/**"]),
    includes = [
        "include",
        "include/torch/csrc/api/include",
        "python_include",
    ],
    defines = [
        "_GLIBCXX_USE_CXX11_ABI={abi}",
        "TORCH_API_INCLUDE_EXTENSION_H",
    ],
    linkopts = [
        "-L{torch_dir}/lib",
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
    ],
)

sh_binary(
    name = "python",
    srcs = ["bin/python3"],
)
"""

_MISSING = """
package(default_visibility = ["//visibility:public"])

# No torch: {reason}
genrule(
    name = "torch_missing",
    outs = ["torch_missing.txt"],
    cmd = "echo 'no torch in {venv}: {reason} (run tools/setup.sh)' >&2; exit 1",
)

cc_library(
    name = "torch",
    srcs = [":torch_missing"],
)

sh_binary(
    name = "python",
    srcs = [":torch_missing"],
)
"""

def _torch_repository_impl(rctx):
    workspace = rctx.path(Label("//:WORKSPACE")).dirname
    venv = rctx.os.environ.get("BRAID_VENV", "") or "%s/.venv" % workspace
    python = "%s/bin/python" % venv
    probe = rctx.execute([python, "-c", _PROBE], environment = {"PYTHONDONTWRITEBYTECODE": "1"})
    if probe.return_code != 0:
        reason = (probe.stderr.strip().splitlines() or ["%s did not run" % python])[-1]
        rctx.file("BUILD.bazel", _MISSING.format(venv = venv, reason = reason.replace("'", "").replace('"', "")))
        return
    torch_dir, python_include, abi, version = probe.stdout.strip().splitlines()[-4:]
    rctx.symlink(torch_dir + "/include", "include")
    rctx.symlink(python_include, "python_include")
    rctx.file("bin/python3", "#!/bin/sh\nexec %s \"$@\"\n" % python, executable = True)
    rctx.file("BUILD.bazel", _BUILD.format(torch_dir = torch_dir, abi = abi, version = version))

torch_repository = repository_rule(
    implementation = _torch_repository_impl,
    environ = ["BRAID_VENV"],
    local = True,
)
