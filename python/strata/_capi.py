"""ctypes declarations of libstrata.so's C ABI (core/include/libstrata.h), and StrataError.

The library is found, in order: $STRATA_LIB (a path to libstrata.so), the build tree this
package sits in (../../build/<mode>/lib: release, then debug), the directory of this package
(an installed copy may ship the .so beside it), then the system's search path (libstrata.so.1).
"""
import ctypes
import os
from typing import Optional

API_MAJOR = 1


class StrataError(RuntimeError):
    """A Strata failure: the C message (naming the file and the cause) and its status.

    ``code`` is the negative status of libstrata.h (-4 ECORRUPT, -7 EBUDGET, -13 ESHAPE, ...),
    ``status`` its name ("ECORRUPT").
    """

    NAMES = {-1: "EINVAL", -2: "EIO", -3: "ENOMEM", -4: "ECORRUPT", -5: "EVERSION", -6: "ENOSPC",
             -7: "EBUDGET", -8: "EPOLICY", -9: "ESCRIPT", -10: "ENOTFOUND", -11: "EUNSUPPORTED",
             -12: "EGPU", -13: "ESHAPE", -14: "EINTR"}

    def __init__(self, message: str, code: int = -1):
        super().__init__(message)
        self.code = code
        self.status = self.NAMES.get(code, str(code))


_P = ctypes.c_void_p
_U32, _U64, _I32, _I64 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64
_PU32 = ctypes.POINTER(ctypes.c_uint32)
_PF = ctypes.POINTER(ctypes.c_float)
_S = ctypes.c_char_p

# name: (restype, argtypes)
_FUNCS = {
    "strata_api_version": (_U32, []),
    "strata_api_last_error": (_S, []),
    "strata_api_status_name": (_S, [_I32]),
    "strata_api_gpu_count": (_I32, []),
    "strata_api_store_open": (_I32, [_S, ctypes.POINTER(_P)]),
    "strata_api_store_close": (None, [_P]),
    "strata_api_store_shape": (_I64, [_P, _I32]),
    "strata_api_store_expert_fmt": (_I32, [_P, _U32, _U32]),
    "strata_api_store_dequantize": (_I32, [_P, _U32, _U32, _P, _P, _P]),
    "strata_api_engine_open": (_I32, [_P, _U64, _U64, _S, _S, _S, _S, ctypes.POINTER(_P)]),
    "strata_api_engine_close": (None, [_P]),
    "strata_api_engine_on_gpu": (_I32, [_P]),
    "strata_api_engine_name": (_S, [_P]),
    "strata_api_engine_acquire": (_I32, [_P, _U64, _U32, _P, _U32, _P, _P, _P, _U32, _P, _P]),
    "strata_api_engine_release": (_I32, [_P, _U64, _U32]),
    "strata_api_moe_forward": (_I32, [_P, _U64, _U32, _U32, _U32, _P, _P, _P, _P, _U64, _P, _P, _P, _U32]),
    "strata_api_engine_stats": (_I32, [_P, _P, _U32]),
    "strata_api_recorder_open": (_I32, [_S, _U32, _U32, _U32, _U32, _U32, _S, ctypes.POINTER(_P)]),
    "strata_api_recorder_layer": (_I32, [_P, _U32, _U32, _P, _P, _P, _P]),
    "strata_api_recorder_step": (_I32, [_P, _U32, _U32, _I32]),
    "strata_api_recorder_count": (_U64, [_P]),
    "strata_api_recorder_finish": (_I32, [_P, _I32]),
}

SHAPE_KEYS = ("n_layers", "first_moe_layer", "n_moe_layers", "n_experts", "top_k", "hidden", "inter",
              "n_shared", "shared_inter")
FMT_NAMES = ("f32", "bf16", "hot", "warm", "cold", "q4", "q3")

_lib: Optional[ctypes.CDLL] = None


def _candidates():
    env = os.environ.get("STRATA_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    for mode in ("release", "debug"):
        yield os.path.join(root, "build", mode, "lib", "libstrata.so")
    yield os.path.join(here, "libstrata.so")
    yield "libstrata.so.1"


def lib() -> ctypes.CDLL:
    """The loaded library (loaded and checked on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            L = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        for name, (res, args) in _FUNCS.items():
            f = getattr(L, name)
            f.restype, f.argtypes = res, args
        v = L.strata_api_version()
        if v // 10000 != API_MAJOR:
            raise StrataError("%s: C ABI version %d.%d, this package needs %d.x" %
                              (path, v // 10000, v % 10000, API_MAJOR), code=-5)
        _lib = L
        return L
    raise StrataError("libstrata.so not found (tried %s); build it with `scons` or set STRATA_LIB" %
                      ", ".join(tried), code=-10)


def check(rc: int) -> int:
    """Raise StrataError with the C message for a negative status; return rc otherwise."""
    if rc < 0:
        raise StrataError(lib().strata_api_last_error().decode("utf-8", "replace"), code=rc)
    return rc


def cstr(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode()
