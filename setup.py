"""setup.py — the build step pyproject.toml cannot say: make builds libflashc.so, which goes into the package.

Environment: FLASHC_MAKE_ARGS (e.g. "FLASHC_CUDA=0" for a CPU-only library, "-j8"), MAKE (default make).
The wheel is platform-specific (it holds a compiled library) but needs no Python headers: the binding
loads the library with ctypes."""
import os
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    """build_py, then `make build/libflashc.so` in the source tree, copied into the built package."""

    def run(self):
        super().run()
        make = os.environ.get("MAKE", "make")
        args = shlex.split(os.environ.get("FLASHC_MAKE_ARGS", ""))
        subprocess.run([make, "-C", ROOT] + args + ["build/libflashc.so"], check=True)
        dest = os.path.join(self.build_lib, "flashc")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "build", "libflashc.so"), os.path.join(dest, "libflashc.so"))


try:  # the wheel's tag: any Python 3 (ctypes, no extension module), this platform
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

CMDCLASS = {"build_py": BuildWithLibrary}
if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    CMDCLASS["bdist_wheel"] = PlatformWheel


class BinaryDistribution(Distribution):
    """A wheel tagged for this platform (it carries libflashc.so)."""

    def has_ext_modules(self):
        return True


setup(cmdclass=CMDCLASS, distclass=BinaryDistribution,
      options={"build": {"build_base": "build/python"}})  # setuptools's own files, inside make's build/
