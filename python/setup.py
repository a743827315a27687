"""Install the strata package (pure Python over libstrata.so; no compiled extension).

    cd python && python3 setup.py install --user        # Debian's setuptools
    pip install --no-index ./python                       # or pip, offline
    STRATA_LIB=/path/to/libstrata.so python3 -m strata.run --help

Set STRATA_SO=/path/to/libstrata.so when installing to ship the library inside the package
(it is then found beside strata/__init__.py); otherwise the package finds it through
$STRATA_LIB, a build tree it sits in, or the system's search path (libstrata.so.1).
"""
import os
import shutil

from setuptools import setup

so = os.environ.get("STRATA_SO")
pkg_data = {}
if so:
    shutil.copy(so, os.path.join(os.path.dirname(os.path.abspath(__file__)), "strata", "libstrata.so"))
    pkg_data = {"strata": ["libstrata.so"]}

setup(name="strata", version="1.0", description="Strata from Python: the C ABI over ctypes and a PyTorch MoE runner",
      packages=["strata"], package_data=pkg_data, python_requires=">=3.9")
