"""Builds braid's extensions for the Python that runs pip (pyproject.toml says how to call it).

braid._braid links libbraid.so (braid's C API, built by Bazel: `bazel build //capi:libbraid.so`,
or given as BRAID_LIBBRAID) and finds it beside itself. braid._torch, when torch is importable, is
a torch.utils.cpp_extension.CppExtension: torch's include paths, its -D_GLIBCXX_USE_CXX11_ABI and
its libraries, so it matches the torch that is installed. BRAID_NO_TORCH=1 skips it.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
VERSION = re.search(r'kVersion\[\] = "([^"]+)"', (ROOT / "capi/braid.cc").read_text()).group(1)
CXXFLAGS = ["-std=c++20", "-O2", "-fvisibility=hidden"]
LINK = ["-Wl,-rpath,$ORIGIN"]


def libbraid():
    """The libbraid.so to ship: BRAID_LIBBRAID, or the one Bazel builds."""
    given = os.environ.get("BRAID_LIBBRAID")
    if given:
        return Path(given).resolve()
    subprocess.run(["bazel", "build", "//capi:libbraid.so"], cwd=ROOT, check=True, stdout=sys.stderr)
    return (ROOT / "bazel-bin/capi/libbraid.so").resolve()


def pybind11_include():
    try:
        import pybind11

        return pybind11.get_include()
    except ImportError:
        return "/usr/include"  # Debian's pybind11-dev


def torch_extension():
    if os.environ.get("BRAID_NO_TORCH") == "1":
        return None, build_ext
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        print("setup.py: torch is not importable: braid.torch is left out", file=sys.stderr)
        return None, build_ext
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "python/torch_backend").glob("*.cc"))
    ext = CppExtension(
        "braid._torch",
        sources,
        include_dirs=[str(ROOT)],
        extra_compile_args=CXXFLAGS,
        extra_link_args=LINK,
        libraries=["braid"],
    )
    return ext, BuildExtension  # ninja (tools/requirements.txt) compiles the sources in parallel


class BuildWithLibbraid:
    """Puts libbraid.so into the package and links the extensions against it (a build_ext mixin)."""

    def run(self):
        lib = libbraid()
        target = Path(self.build_lib) / "braid"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, target / "libbraid.so")
        for ext in self.extensions:
            ext.library_dirs.append(str(lib.parent))
        if self.inplace:
            shutil.copy2(lib, ROOT / "python/braid/libbraid.so")
        super().run()


torch_ext, base_build_ext = torch_extension()  # torch's BuildExtension where torch is there


class BuildExt(BuildWithLibbraid, base_build_ext):
    pass


extensions = [
    Extension(
        "braid._braid",
        ["python/braid_module.cc", "python/braid_arrays.cc"],
        include_dirs=[str(ROOT), pybind11_include()],
        extra_compile_args=CXXFLAGS,
        extra_link_args=LINK,
        libraries=["braid"],
        language="c++",
    )
]
if torch_ext is not None:
    extensions.append(torch_ext)

setup(version=VERSION, ext_modules=extensions, cmdclass={"build_ext": BuildExt})
