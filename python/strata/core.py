"""One class per libstrata handle: Store, Engine, Recorder (close() and `with`), and the tensor
protocol glue.  Tensors cross without copies: anything with ``__cuda_array_interface__`` (CUDA
tensors of PyTorch, CuPy) on the GPU path, anything with ``__array_interface__`` (NumPy) or a CPU
torch tensor on the host path, or anything with ``__dlpack__`` (imported with
``torch.from_dlpack``, zero copy).  The caller's CUDA stream is an argument (default: PyTorch's
current stream on the tensor's device).
"""
import ctypes
import json
from typing import Any, Dict, Optional, Sequence, Tuple

from . import _capi
from ._capi import StrataError, check, cstr, lib

try:
    import torch
except ImportError:  # the C ABI works without PyTorch (NumPy arrays on the host path)
    torch = None

_TYPESTR = {"float32": "<f4", "int32": "<i4"}
_TORCH = {"float32": torch.float32, "int32": torch.int32} if torch is not None else {}


def _iface(obj: Any) -> Tuple[Dict[str, Any], bool]:
    """(array interface dict, on_gpu) of obj, without copying it."""
    if hasattr(obj, "__cuda_array_interface__"):
        return obj.__cuda_array_interface__, True
    if hasattr(obj, "__array_interface__"):
        return obj.__array_interface__, False
    if torch is not None and isinstance(obj, torch.Tensor):
        if obj.device.type != "cpu":
            raise StrataError("tensor on %s: CUDA tensors or host memory only" % obj.device, code=-1)
        return _torch_cpu_iface(obj), False
    if hasattr(obj, "__dlpack__") and torch is not None:
        return _iface(torch.from_dlpack(obj))
    raise StrataError("%s: not an array (no __cuda_array_interface__, __array_interface__ or __dlpack__)" %
                      type(obj).__name__, code=-1)


def _torch_cpu_iface(t: "torch.Tensor") -> Dict[str, Any]:
    names = {torch.float32: "<f4", torch.int32: "<i4", torch.float16: "<f2", torch.bfloat16: "<V2",
             torch.float64: "<f8", torch.int64: "<i8"}
    st = t.stride()
    contiguous_strides = None if t.is_contiguous() else tuple(s * t.element_size() for s in st)
    return {"data": (t.data_ptr(), False), "typestr": names.get(t.dtype, str(t.dtype)),
            "shape": tuple(t.shape), "strides": contiguous_strides}


def array_ptr(obj: Any, name: str, dtype: str, shape: Sequence[int], gpu: Optional[bool] = None) -> int:
    """The address of obj's data after checking dtype, shape, contiguity and place.

    gpu: True / False requires device / host memory, None accepts either."""
    if torch is not None and type(obj) is torch.Tensor:  # the common case, without building a dict
        on_gpu = obj.is_cuda
        if obj.dtype is _TORCH[dtype] and obj.shape == shape and obj.is_contiguous() and \
                (gpu is None or on_gpu == gpu) and (on_gpu or obj.device.type == "cpu"):
            return obj.data_ptr()
    it, on_gpu = _iface(obj)
    if gpu is not None and on_gpu != gpu:
        raise StrataError("%s: %s memory, this path needs %s memory" %
                          (name, "device" if on_gpu else "host", "device" if gpu else "host"), code=-1)
    if it["typestr"] != _TYPESTR[dtype]:
        raise StrataError("%s: dtype %s, expected %s (%s)" % (name, it["typestr"], _TYPESTR[dtype], dtype),
                          code=-13)
    if tuple(it["shape"]) != tuple(shape):
        raise StrataError("%s: shape %s, expected %s" % (name, tuple(it["shape"]), tuple(shape)), code=-13)
    if it.get("strides") is not None:
        st, want, acc = tuple(it["strides"]), [], int(_TYPESTR[dtype][-1])
        for s in reversed(shape):
            want.insert(0, acc)
            acc *= s
        if any(a != b for a, b, n in zip(st, want, shape) if n > 1):
            raise StrataError("%s: not contiguous (strides %s)" % (name, st), code=-13)
    return int(it["data"][0])


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) if torch is not None else None


def current_stream(obj: Any) -> int:
    """PyTorch's current CUDA stream on obj's device, as the integer the C ABI takes."""
    if torch is not None and isinstance(obj, torch.Tensor) and obj.is_cuda:
        if _raw_stream is not None:  # the same handle, without building a Stream object
            return int(_raw_stream(obj.get_device()))
        return int(torch.cuda.current_stream(obj.device).cuda_stream)
    return 0


def gpu_count() -> int:
    return lib().strata_api_gpu_count()


class _Handle:
    """An owned C handle, closed once: by close(), at the end of a with block, or when collected.
    Subclasses set _h in __init__ and name their close function in _close."""
    _h = None
    _close = ""

    def _closed(self) -> str:
        return "%s is closed" % type(self).__name__.lower()

    @property
    def handle(self) -> ctypes.c_void_p:
        if self._h is None:
            raise StrataError(self._closed(), code=-1)
        return self._h

    def close(self) -> None:
        if self._h is not None:
            h, self._h = self._h, None
            getattr(lib(), self._close)(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Store(_Handle):
    """A shard directory (strata synth / strata quantize output), checked on open."""
    _close = "strata_api_store_close"

    def __init__(self, path: str):
        self.path = path
        h = ctypes.c_void_p()
        check(lib().strata_api_store_open(cstr(path), ctypes.byref(h)))
        self._h = h
        self.shape = {k: int(lib().strata_api_store_shape(h, i)) for i, k in enumerate(_capi.SHAPE_KEYS)}

    def _closed(self) -> str:
        return "%s: store is closed" % self.path

    def expert_format(self, moe_layer: int, expert: int) -> str:
        return _capi.FMT_NAMES[check(lib().strata_api_store_expert_fmt(self.handle, moe_layer, expert))]

    def dequantize(self, moe_layer: int, expert: int):
        """(gate, up, down) float32 torch tensors of one expert, as the kernels compute with."""
        H, I = self.shape["hidden"], self.shape["inter"]
        g, u, d = torch.empty(I, H), torch.empty(I, H), torch.empty(H, I)
        check(lib().strata_api_store_dequantize(self.handle, moe_layer, expert, g.data_ptr(), u.data_ptr(),
                                                d.data_ptr()))
        return g, u, d



def parse_size(s) -> int:
    """'2G', '512M', '1.5T', 4096 -> bytes (binary units, as the CLI reads them)."""
    if isinstance(s, int):
        return s
    t = str(s).strip().upper().rstrip("B").rstrip("I")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mul > 1 else t) * mul)
    except ValueError:
        raise StrataError("size '%s': expected bytes or a number with K, M, G or T" % s, code=-1) from None


class Engine(_Handle):
    """The expert cache engine over a Store: tier budgets and placement / eviction / prefetch
    policies (any Strata spec), and the fused MoE layer on caller-owned activations."""
    _close = "strata_api_engine_close"

    def __init__(self, store: Store, vram="8G", ram="32G", place: str = "static", evict: str = "lru",
                 prefetch: str = "none", gpu: str = "auto", max_tokens: int = 256, options: str = ""):
        self.store = store
        opts = "gpu=%s max_tokens=%d %s" % (gpu, max_tokens, options)
        h = ctypes.c_void_p()
        check(lib().strata_api_engine_open(store.handle, parse_size(vram), parse_size(ram), cstr(place),
                                           cstr(evict), cstr(prefetch), cstr(opts.strip()), ctypes.byref(h)))
        self._h = h
        self._fwd = lib().strata_api_moe_forward
        self.on_gpu = bool(lib().strata_api_engine_on_gpu(h))
        self.name = lib().strata_api_engine_name(h).decode()
        self.max_tokens = max_tokens
        s = store.shape
        self.hidden, self.n_experts, self.n_moe_layers = s["hidden"], s["n_experts"], s["n_moe_layers"]


    def moe_forward(self, token: int, moe_layer: int, x, y, ids, weights, stream: Optional[int] = None,
                    hints=None) -> None:
        """y += sum_j weights[:, j] * expert_{ids[:, j]}(x), for one MoE layer of one step.

        x, y: [T, hidden] float32 (CUDA tensors when the engine is on the GPU, else host);
        ids: [T, k] int32 and weights [T, k] float32 on the host (-1 ids are skipped);
        stream: the CUDA stream to enqueue on (default: PyTorch's current stream);
        hints: None or (layers, experts, scores) host arrays: lookahead predictions for
        later MoE layers."""
        T, H = len(ids), self.hidden
        k = ids.shape[1] if T else 1
        gpu = self.on_gpu
        px = array_ptr(x, "x", "float32", (T, H), gpu)
        py = array_ptr(y, "y", "float32", (T, H), gpu)
        pi = array_ptr(ids, "ids", "int32", (T, k), False)
        pw = array_ptr(weights, "weights", "float32", (T, k), False)
        hl = he = hs = None
        nh = 0
        if hints is not None:
            nh = len(hints[0])
            hl = array_ptr(hints[0], "hint layers", "int32", (nh,), False)
            he = array_ptr(hints[1], "hint experts", "int32", (nh,), False)
            hs = array_ptr(hints[2], "hint scores", "float32", (nh,), False)
        if stream is None:
            stream = current_stream(x) if gpu else 0
        rc = self._fwd(self.handle, token, moe_layer, T, k, pi, pw, px, py, stream, hl, he, hs, nh)
        if rc:
            check(rc)

    def stats(self) -> Dict[str, Any]:
        n = check(lib().strata_api_engine_stats(self.handle, None, 0))
        buf = ctypes.create_string_buffer(n + 1)
        lib().strata_api_engine_stats(self.handle, buf, n + 1)
        return json.loads(buf.value.decode())



class Recorder:
    """A routing trace (.strace, or .jsonl) recorded from a running model, step by step."""

    def __init__(self, path: str, n_moe_layers: int, n_experts: int, top_k: int, pred_depth: int = 0,
                 pred_topn: int = 0, model: Optional[str] = None):
        self.path = path
        self.top_k, self.depth, self.topn = top_k, pred_depth, pred_topn
        h = ctypes.c_void_p()
        check(lib().strata_api_recorder_open(cstr(path), n_moe_layers, n_experts, top_k, pred_depth, pred_topn,
                                             cstr(model), ctypes.byref(h)))
        self._h = h

    def layer(self, moe_layer: int, ids, weights=None, pred_ids=None, pred_scores=None) -> None:
        """ids [T, k] int32, weights [T, k] float32, pred_ids / pred_scores [T, depth, topn]: host."""
        T = len(ids)
        pi = array_ptr(ids, "ids", "int32", (T, self.top_k), False)
        pw = array_ptr(weights, "weights", "float32", (T, self.top_k), False) if weights is not None else None
        pp = ps = None
        if pred_ids is not None:
            sh = (T, self.depth, self.topn)
            pp = array_ptr(pred_ids, "pred_ids", "int32", sh, False)
            ps = array_ptr(pred_scores, "pred_scores", "float32", sh, False) if pred_scores is not None else None
        check(lib().strata_api_recorder_layer(self._h, moe_layer, T, pi, pw, pp, ps))

    def step(self, req: int, pos0: int, decode: bool) -> None:
        check(lib().strata_api_recorder_step(self._h, req, pos0, 1 if decode else 0))

    @property
    def count(self) -> int:
        return int(lib().strata_api_recorder_count(self._h)) if self._h is not None else 0

    def finish(self, commit: bool = True) -> None:
        if self._h is not None:
            h, self._h = self._h, None
            check(lib().strata_api_recorder_finish(h, 1 if commit else 0))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.finish(commit=exc_type is None)

    def __del__(self):
        try:
            self.finish(commit=False)
        except Exception:
            pass
