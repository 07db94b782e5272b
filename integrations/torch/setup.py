# Builds the chorus_torch extension against an installed or built Chorus:
#   CHORUS_INCLUDE_DIR=<src>/include CHORUS_LIBRARY_DIR=<build>/lib \
#     /usr/bin/python3 setup.py build_ext --build-lib <out>
# Without the variables it expects Chorus installed where the compiler and
# linker look by default. CHORUS_TORCH_RPATH, when set, replaces the library
# directory as the extension's run path (an installed libchorus's directory).
# The usual entry points are build_ext.sh (ctest fixture torch.build) and
# `cmake --install <build> --component torch` (docs/embedding.md); both keep
# every build file out of the source tree.
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
include_dirs = [d for d in [os.environ.get("CHORUS_INCLUDE_DIR")] if d]
library_dirs = [d for d in [os.environ.get("CHORUS_LIBRARY_DIR")] if d]
runtime_dirs = [d for d in [os.environ.get("CHORUS_TORCH_RPATH")] if d] or library_dirs

setup(
    name="chorus_torch",
    version="0.1.0",
    packages=["chorus_torch"],
    ext_modules=[
        CppExtension(
            "chorus_torch._C",
            [
                os.path.join("csrc", f)
                for f in (
                    "process_group_chorus.cc",
                    "process_group_collectives.cc",
                    "process_group_p2p.cc",
                    "chorus_work.cc",
                    "tensor_args.cc",
                )
            ],
            include_dirs=include_dirs,
            library_dirs=library_dirs,
            runtime_library_dirs=runtime_dirs,
            libraries=["chorus"],
            extra_compile_args=["-O2", "-std=c++17"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
