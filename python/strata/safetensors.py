"""A small safetensors reader and writer (Debian ships no python safetensors package).

Format: an 8-byte little-endian header length, a JSON header
``{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}``,
then the data region.  The reader checks what core/safetensors.c checks: header inside the file and
at most 100 MiB, known dtype, shape x dtype size equal to end - begin, extents inside the data
region and not overlapping.  Tensors are views of a private (copy-on-write) mapping of the file:
nothing is read until used, and a caller may modify them without touching the file.
"""
import json
import mmap
import os
import struct
from typing import Dict, Iterator, List, Optional, Tuple

import torch

from ._capi import StrataError

_DTYPES = {
    "F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
    "I16": (torch.int16, 2), "I8": (torch.int8, 1), "U8": (torch.uint8, 1), "BOOL": (torch.bool, 1),
}
_NAMES = {v[0]: k for k, v in _DTYPES.items()}
_HEADER_MAX = 100 << 20


class SafetensorsFile:
    """One .safetensors file: names, dtypes, shapes, and zero-copy tensors."""

    def __init__(self, path: str):
        self.path = path
        self._mm = None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise StrataError("%s: cannot open: %s" % (path, e.strerror), code=-2) from None
        try:
            size = os.fstat(fd).st_size
            if size < 8:
                raise self._bad("file of %d bytes is shorter than the 8-byte header length" % size)
            n = struct.unpack("<Q", os.pread(fd, 8, 0))[0]
            if n > _HEADER_MAX or 8 + n > size:
                raise self._bad("header length %d does not fit the file (%d bytes, limit 100 MiB)" % (n, size))
            raw = os.pread(fd, n, 8)
            try:
                hdr = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise self._bad("header is not JSON: %s" % e) from None
            if not isinstance(hdr, dict):
                raise self._bad("header is not a JSON object")
            self.metadata = hdr.pop("__metadata__", None) or {}
            self.data_start = 8 + n
            data_len = size - self.data_start
            self.info: Dict[str, Tuple[str, List[int], int, int]] = {}
            spans = []
            for name, t in hdr.items():
                try:
                    dt, shape, (b, e) = t["dtype"], [int(s) for s in t["shape"]], t["data_offsets"]
                except (KeyError, TypeError, ValueError):
                    raise self._bad("tensor '%s': needs dtype, shape and data_offsets" % name) from None
                if dt not in _DTYPES:
                    raise self._bad("tensor '%s': unknown dtype %s" % (name, dt))
                count = 1
                for s in shape:
                    if s < 0:
                        raise self._bad("tensor '%s': negative dimension in %s" % (name, shape))
                    count *= s
                if not (0 <= b <= e <= data_len):
                    raise self._bad("tensor '%s': extent [%d, %d) outside the data region (%d bytes)" %
                                    (name, b, e, data_len))
                if count * _DTYPES[dt][1] != e - b:
                    raise self._bad("tensor '%s': shape %s x %s is %d bytes, extent holds %d" %
                                    (name, shape, dt, count * _DTYPES[dt][1], e - b))
                self.info[name] = (dt, shape, b, e)
                if e > b:
                    spans.append((b, e, name))
            spans.sort()
            for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
                if b1 < e0:
                    raise self._bad("tensors '%s' and '%s' overlap" % (n0, n1))
            self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY) if size else None
        finally:
            os.close(fd)

    def _bad(self, why: str) -> StrataError:
        return StrataError("%s: %s" % (self.path, why), code=-4)

    def keys(self) -> List[str]:
        return list(self.info)

    def get(self, name: str) -> torch.Tensor:
        if name not in self.info:
            raise StrataError("%s: no tensor '%s'" % (self.path, name), code=-10)
        dt, shape, b, e = self.info[name]
        dtype, size = _DTYPES[dt]
        if e == b:
            return torch.empty(shape, dtype=dtype)
        t = torch.frombuffer(self._mm, dtype=dtype, count=(e - b) // size, offset=self.data_start + b)
        return t.view(shape)


class Checkpoint:
    """A Hugging Face checkpoint directory: config.json + *.safetensors (with or without an index)."""

    def __init__(self, path: str):
        self.path = path
        cfg = os.path.join(path, "config.json")
        try:
            with open(cfg) as f:
                self.config = json.load(f)
        except OSError as e:
            raise StrataError("%s: cannot read: %s" % (cfg, e.strerror), code=-2) from None
        except ValueError as e:
            raise StrataError("%s: not JSON: %s" % (cfg, e), code=-4) from None
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                wm = json.load(f).get("weight_map", {})
            files = sorted(set(wm.values()))
        else:
            files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if not files:
            raise StrataError("%s: no *.safetensors files" % path, code=-10)
        self.files = [SafetensorsFile(os.path.join(path, f)) for f in files]
        self.where: Dict[str, SafetensorsFile] = {}
        for sf in self.files:
            for k in sf.keys():
                if k in self.where:
                    raise StrataError("%s: tensor '%s' in both %s and %s" %
                                      (path, k, self.where[k].path, sf.path), code=-4)
                self.where[k] = sf

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def keys(self) -> Iterator[str]:
        return iter(self.where)

    def get(self, name: str) -> torch.Tensor:
        sf = self.where.get(name)
        if sf is None:
            raise StrataError("%s: checkpoint has no tensor '%s'" % (self.path, name), code=-10)
        return sf.get(name)

    def maybe(self, name: str) -> Optional[torch.Tensor]:
        return self.get(name) if name in self.where else None


def save_file(tensors: Dict[str, torch.Tensor], path: str, metadata: Optional[Dict[str, str]] = None) -> None:
    """Write tensors (any device, contiguous copies made on the host) to path (tmp + rename)."""
    hdr, off, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        if t.dtype not in _NAMES:
            raise StrataError("%s: tensor '%s' has dtype %s, not storable" % (path, name, t.dtype), code=-1)
        nbytes = t.numel() * t.element_size()
        hdr[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + nbytes]}
        blobs.append(t)
        off += nbytes
    if metadata:
        hdr["__metadata__"] = metadata
    raw = json.dumps(hdr, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in blobs:
            if t.numel():
                f.write(t.view(torch.uint8).reshape(-1).numpy().tobytes() if t.dtype == torch.bfloat16
                        else t.numpy().tobytes())
    os.replace(tmp, path)
