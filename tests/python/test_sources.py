"""Checks on the sources themselves (no build needed).

A build without CUDA links kernels/gpu_none.c in place of the CUDA objects, and
CI builds with nvcc: a GPU entry point added to kernels/kernels.h without its
stub compiles in CI and breaks `scons cuda=0` on a machine without the
toolkit.  Every strata_gpu_* function kernels.h declares must be defined in a
C file of kernels/ (gpu_none.c, or a host-only file such as moe_config.c)."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)


def _declared(path):
    return set(re.findall(r"\b(strata_gpu_\w+)\s*\(", _strip_comments(open(path).read())))


def _defined(paths):
    names = set()
    for p in paths:
        names |= set(re.findall(r"\b(strata_gpu_\w+)\s*\([^;{]*\)\s*\{", _strip_comments(open(p).read()), flags=re.S))
    return names


def test_every_gpu_entry_point_has_a_host_definition():
    declared = _declared(os.path.join(ROOT, "kernels", "kernels.h"))
    defined = _defined(glob.glob(os.path.join(ROOT, "kernels", "*.c")))
    assert len(declared) > 10, "kernels.h declares no strata_gpu_ functions: the pattern is wrong"
    missing = sorted(declared - defined)
    assert not missing, ("declared in kernels/kernels.h, defined in no kernels/*.c file "
                         "(a cuda=0 build cannot link): " + ", ".join(missing))
