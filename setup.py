"""Build the Cython core (topics._core._ext).

Everything else lives in pyproject.toml. TOPICS_CYTHON_DEBUG=1 builds with
annotations, line tracing and C asserts for profiling and debugging.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("TOPICS_CYTHON_DEBUG") == "1"

macros = [("CYTHON_TRACE_NOGIL", "1")] if DEBUG else [("NDEBUG", "1")]
# No depends= lists: cythonize follows each .pyx's include statements, so editing a .pxi
# re-cythonizes (and so recompiles) the extension that includes it.
extensions = [
    Extension(
        "topics._core._ext",
        ["topics/_core/_ext.pyx"],
        include_dirs=["topics/_core"],
        define_macros=macros,
        extra_compile_args=["-O3", "-fno-strict-aliasing"] if not DEBUG else ["-O0", "-g"],
    ),
    Extension(
        "topics._core._columns",
        ["topics/_core/_columns.pyx"],
        define_macros=macros,
        extra_compile_args=["-O3", "-fno-strict-aliasing"] if not DEBUG else ["-O0", "-g"],
    ),
    Extension(
        "topics._core._fanout",
        ["topics/_core/_fanout.pyx"],
        define_macros=macros,
        extra_compile_args=["-O3", "-fno-strict-aliasing"] if not DEBUG else ["-O0", "-g"],
    ),
    Extension(
        "topics._core._scan",
        ["topics/_core/_scan.pyx"],
        define_macros=macros,
        extra_compile_args=["-O3", "-fno-strict-aliasing"] if not DEBUG else ["-O0", "-g"],
    ),
]

setup(
    ext_modules=cythonize(
        extensions,
        annotate=DEBUG,
        compiler_directives={
            "language_level": "3",
            "linetrace": DEBUG,
            "boundscheck": DEBUG,
            "wraparound": DEBUG,
            "initializedcheck": DEBUG,
            "cdivision": True,
        },
    )
)
