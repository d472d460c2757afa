"""_arrays.py — turns numpy arrays and torch tensors into fc_tensors, and allocates outputs like them."""
import ctypes
import sys

from ._lib import (FC_BF16, FC_FP16, FC_FP32, FC_INT32, FC_MAX_DIMS, FcTensor, fail)

try:
    import numpy as np
except ImportError:  # torch-only use needs no numpy
    np = None

_NP_DTYPES = {"float16": FC_FP16, "float32": FC_FP32, "int32": FC_INT32, "bfloat16": FC_BF16}
FLOAT_DTYPES = ("float16", "bfloat16", "float32")


def _torch():
    """The torch module if the program imported it, else None (flashc never imports torch itself)."""
    return sys.modules.get("torch")


def is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def is_array(x):
    return is_torch(x) or (np is not None and isinstance(x, np.ndarray))


def dtype_name(x):
    """'float16', 'bfloat16', 'float32', 'int32', ... for either library."""
    if is_torch(x):
        return str(x.dtype).replace("torch.", "")
    return x.dtype.name


def device_of(x):
    """('cpu', None) or ('cuda', index); anything else is rejected by the caller."""
    if is_torch(x):
        return (x.device.type, x.device.index)
    return ("cpu", None)


def shape_of(x):
    return tuple(int(n) for n in x.shape)


def _numel(x):
    return x.numel() if is_torch(x) else x.size


def _row_major(shape):
    strides, n = [], 1
    for dim in reversed(shape):
        strides.insert(0, n)
        n *= max(dim, 1)
    return tuple(strides)


def _elem_strides(x):
    """Strides in elements (None if not whole elements); an empty array gets row-major ones."""
    if _numel(x) == 0:
        return _row_major(shape_of(x))
    if is_torch(x):
        return tuple(x.stride())
    size = x.dtype.itemsize
    if any(s % size for s in x.strides):
        return None
    return tuple(s // size for s in x.strides)


_EMPTY = ctypes.create_string_buffer(256)  # a non-NULL address for empty arrays (never dereferenced)


def _data_ptr(x):
    """The array's address; an empty array may have none (torch), yet must not read as absent (NULL)."""
    ptr = x.data_ptr() if is_torch(x) else x.ctypes.data
    return ptr or ctypes.addressof(_EMPTY)


def _well_strided(x):
    """Last dimension contiguous and no negative or fractional strides: what the C API takes as is."""
    st = _elem_strides(x)
    if st is None or any(s < 0 for s in st):
        return False
    return x.ndim == 0 or st[-1] == 1


def _contiguous(x):
    return x.contiguous() if is_torch(x) else np.ascontiguousarray(x)


def check_array(x, name):
    """Rejects what is not a numpy array or torch tensor."""
    if not is_array(x):
        fail("%s: expected a numpy array or torch tensor, got %s" % (name, type(x).__name__))
    return x


def as_input(x, name, dtypes=FLOAT_DTYPES):
    """An array the C API can read: the same one, or a copy with a contiguous last dimension."""
    check_array(x, name)
    if dtype_name(x) not in dtypes:
        fail("%s: dtype %s is not supported (%s)" % (name, dtype_name(x), ", ".join(dtypes)))
    return x if _well_strided(x) else _contiguous(x)


def as_inplace(x, name):
    """An array written in place (the KV cache): it must be usable as is, never copied."""
    check_array(x, name)
    if dtype_name(x) not in FLOAT_DTYPES:
        fail("%s: dtype %s is not supported (%s)" % (name, dtype_name(x), ", ".join(FLOAT_DTYPES)))
    if not _well_strided(x):
        fail("%s: is updated in place, so its last dimension must be contiguous (stride 1)" % name)
    if not is_torch(x) and not x.flags.writeable:
        fail("%s: is updated in place but the array is read-only" % name)
    return x


def need_ndim(x, ndims, name):
    if x.ndim not in ndims:
        want = " or ".join(str(n) for n in ndims)
        fail("%s: ndim = %d, expected %s (shape %s)" % (name, x.ndim, want, shape_of(x)))


def to_fc(x, name):
    """The fc_tensor view of an array prepared by as_input/as_inplace/empty_like."""
    code = _NP_DTYPES.get(dtype_name(x))
    if code is None:
        fail("%s: dtype %s has no flashc equivalent" % (name, dtype_name(x)))
    if not 1 <= x.ndim <= FC_MAX_DIMS:
        fail("%s: ndim = %d, must be 1 .. %d" % (name, x.ndim, FC_MAX_DIMS))
    t = FcTensor()
    t.data = _data_ptr(x)
    t.dtype = code
    t.ndim = x.ndim
    for i, (n, s) in enumerate(zip(shape_of(x), _elem_strides(x))):
        t.shape[i], t.stride[i] = n, s
    return t


def empty_like(like, shape, dtype=None):
    """An uninitialised contiguous array in like's library and device; dtype None = like's dtype."""
    if is_torch(like):
        t = _torch()
        dt = like.dtype if dtype is None else getattr(t, dtype)
        return t.empty(shape, dtype=dt, device=like.device)
    return np.empty(shape, dtype=like.dtype if dtype is None else np.dtype(dtype))


def as_int32(x, like, name):
    """An int32 contiguous array in like's library and device, from ints, lists or integer arrays."""
    if is_torch(like):
        t = _torch()
        x = x if is_torch(x) else t.as_tensor(x)
        if x.is_floating_point() or x.is_complex() or x.dtype == t.bool:
            fail("%s: expected integers, got dtype %s" % (name, dtype_name(x)))
        if x.device.type == "cpu" and x.numel() and (int(x.min()) < -2**31 or int(x.max()) >= 2**31):
            fail("%s: values do not fit in int32" % name)
        return x.to(device=like.device, dtype=t.int32).contiguous()
    if is_torch(x):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        fail("%s: expected integers, got dtype %s" % (name, a.dtype.name))
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        fail("%s: values do not fit in int32" % name)
    return np.ascontiguousarray(a, dtype=np.int32)


def as_float(x, like, name, keep=("float32",)):
    """A float array in like's library and device: as is when its dtype is in keep, else float32."""
    if is_torch(like):
        t = _torch()
        x = x if is_torch(x) else t.as_tensor(x, dtype=t.float32)
        if dtype_name(x) not in keep:
            x = x.to(dtype=t.float32)
        x = x.to(device=like.device)
    else:
        if is_torch(x):
            x = x.detach().cpu().float().numpy()
        x = np.asarray(x)
        if x.dtype.name not in keep:
            x = x.astype(np.float32)
    return as_input(x, name, tuple(keep) + ("float32",))


def full_int32(like, n, value):
    """An int32 (n,) array filled with value, in like's library and device."""
    if is_torch(like):
        t = _torch()
        return t.full((n,), int(value), dtype=t.int32, device=like.device)
    return np.full((n,), int(value), dtype=np.int32)


def diff_int32(cu):
    """cu[1:] - cu[:-1] of an int32 array, as a contiguous int32 array of the same library."""
    d = cu[1:] - cu[:-1]
    return _contiguous(d.to(dtype=_torch().int32)) if is_torch(cu) else np.ascontiguousarray(d, np.int32)
