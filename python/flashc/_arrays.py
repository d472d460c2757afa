"""_arrays.py — turns numpy arrays and torch tensors into fc_tensors, and allocates outputs like them."""
import ctypes
import sys

from ._lib import (FC_BF16, FC_E4M3, FC_E5M2, FC_FP16, FC_FP32, FC_INT32, FC_MAX_DIMS, FcTensor, check_errors_on,
                   fail)

try:
    import numpy as np
except ImportError:  # torch-only use needs no numpy
    np = None

_NP_DTYPES = {"float16": FC_FP16, "float32": FC_FP32, "int32": FC_INT32, "bfloat16": FC_BF16,
              "float8_e4m3fn": FC_E4M3, "float8_e5m2": FC_E5M2}  # fp8: torch's names, and ml_dtypes' for numpy
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
DATA_DTYPES = FLOAT_DTYPES + ("float8_e4m3fn", "float8_e5m2")  # q, k, v, caches: fp8 caches (flashc.h, "FP8")


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
EMPTY_ADDRESS = ctypes.addressof(_EMPTY)


def tensor_type():
    """torch.Tensor if the program imported torch, else None."""
    t = _torch()
    return None if t is None else t.Tensor


def _data_ptr(x):
    """The array's address; an empty array may have none (torch), yet must not read as absent (NULL)."""
    ptr = x.data_ptr() if is_torch(x) else x.ctypes.data
    return ptr or EMPTY_ADDRESS


def _itemsize(x):
    return x.element_size() if is_torch(x) else x.dtype.itemsize


def _native(x):
    """numpy arrays may be in either byte order ('>f2'); the C API reads native order. torch is native."""
    return is_torch(x) or x.dtype.isnative


def _aligned(x, align):
    """The data pointer is a multiple of align bytes (an empty array always is)."""
    return _numel(x) == 0 or _data_ptr(x) % align == 0


def _well_strided(x):
    """Last dimension contiguous and no negative or fractional strides: what the C API takes as is."""
    st = _elem_strides(x)
    if st is None or any(s < 0 for s in st):
        return False
    return x.ndim == 0 or st[-1] == 1


def _usable(x, align):
    """Native byte order, well strided, pointer and all but the last stride multiples of align bytes
    (align = the element size, or 16 for q/k/v-like tensors on CUDA)."""
    if not (_native(x) and _well_strided(x) and _aligned(x, max(align, _itemsize(x)))):
        return False
    if align <= _itemsize(x) or _numel(x) == 0:
        return True
    return all(s * _itemsize(x) % align == 0 for s in _elem_strides(x)[:-1])


def strides_of(x):
    """Strides in elements, as the C API gets them (None where they are not whole elements)."""
    return _elem_strides(x)


def copy(x):
    """A contiguous, aligned, native-order copy (contiguous() alone keeps a contiguous but misaligned array)."""
    if is_torch(x):
        return x.clone(memory_format=_torch().contiguous_format)
    return np.require(x, x.dtype.newbyteorder("="), ["C", "A"])


def _native_numpy(x):
    """A numpy array in native byte order and aligned (what torch.as_tensor accepts); others as they are."""
    if np is not None and isinstance(x, np.ndarray) and not (x.dtype.isnative and x.flags.aligned):
        return np.require(x, x.dtype.newbyteorder("="), ["A"])
    return x


def from_dlpack(x, name):
    """A torch tensor (torch imported) or numpy array (CPU data) sharing the memory of a DLPack capsule or
    of an object with __dlpack__ (cupy, JAX, ...); None when x is neither."""
    capsule = type(x).__name__ == "PyCapsule"
    if not capsule and not hasattr(x, "__dlpack__"):
        return None
    t = _torch()
    try:
        if t is not None:
            return t.utils.dlpack.from_dlpack(x)
        if np is not None and not capsule:
            return np.from_dlpack(x)
    except (RuntimeError, TypeError, ValueError, BufferError) as e:
        fail("%s: cannot take this %s through DLPack: %s" % (name, type(x).__name__, e))
    fail("%s: a DLPack %s needs torch (import torch first) or, for CPU data, numpy" % (name, type(x).__name__))


def _maybe_dlpack(x, name):
    """x itself unless it is a DLPack object that is not an array, which from_dlpack converts."""
    if is_array(x) or isinstance(x, (int, float, list, tuple)):
        return x
    y = from_dlpack(x, name)
    return x if y is None else y


def check_array(x, name):
    """x as a numpy array or torch tensor: as it is, or through DLPack (sharing memory); rejects the rest."""
    if is_array(x):
        return x
    y = from_dlpack(x, name)
    if y is None:
        fail("%s: expected a numpy array, a torch tensor or a DLPack object, got %s" % (name, type(x).__name__))
    return y


def _check_dtype(x, name, dtypes):
    if dtype_name(x) not in dtypes:
        fail("%s: dtype %s is not supported (%s)" % (name, dtype_name(x), ", ".join(dtypes)))


def as_input(x, name, dtypes=FLOAT_DTYPES):
    """An array the C API can read: the same one, or a contiguous, aligned, native-order copy of one
    that is not (last dimension not contiguous, byte-swapped '>f2', data not aligned to its elements)."""
    x = check_array(x, name)
    _check_dtype(x, name, dtypes)
    return x if _usable(x, _itemsize(x)) else copy(x)


CUDA_DATA_ALIGN = 16  # bytes: what the CUDA backend needs of q/k/v-like pointers and strides (flashc.h)


def as_data(x, name):
    """as_input for q, k, v, k_new, v_new: on CUDA also copied unless 16-byte aligned (pointer and strides)."""
    x = check_array(x, name)
    _check_dtype(x, name, DATA_DTYPES)
    align = CUDA_DATA_ALIGN if device_of(x)[0] == "cuda" else _itemsize(x)
    return x if _usable(x, align) else copy(x)


def as_inplace(x, name):
    """An array written in place (the KV cache): it must be usable as is, never copied."""
    x = check_array(x, name)
    _check_dtype(x, name, DATA_DTYPES)
    if not _native(x):
        fail("%s: is updated in place, so it must be in native byte order (its dtype %s has byte order %r)"
             % (name, dtype_name(x), x.dtype.byteorder))
    if not _well_strided(x):
        fail("%s: is updated in place, so its last dimension must be contiguous (stride 1)" % name)
    if not _aligned(x, _itemsize(x)):
        fail("%s: is updated in place, so its data must be aligned to its %d-byte elements (address %#x)"
             % (name, _itemsize(x), _data_ptr(x)))
    if not is_torch(x) and not x.flags.writeable:
        fail("%s: is updated in place but the array is read-only" % name)
    return x


def need_ndim(x, ndims, name):
    if x.ndim not in ndims:
        want = " or ".join(str(n) for n in ndims)
        fail("%s: ndim = %d, expected %s (shape %s)" % (name, x.ndim, want, shape_of(x)))


def to_fc(x, name):
    """The fc_tensor view of an array prepared by as_input/as_data/as_inplace/empty_like."""
    code = _NP_DTYPES.get(dtype_name(x))
    if code is None:
        fail("%s: dtype %s has no flashc equivalent" % (name, dtype_name(x)))
    if not 1 <= x.ndim <= FC_MAX_DIMS:
        fail("%s: ndim = %d, must be 1 .. %d" % (name, x.ndim, FC_MAX_DIMS))
    if not (_native(x) and _aligned(x, _itemsize(x))):  # as_input copies such arrays: never reached from it
        fail("%s: must be in native byte order and aligned to its elements" % name)
    t = FcTensor()
    t.data = _data_ptr(x)
    t.dtype = code
    t.ndim = x.ndim
    for i, (n, s) in enumerate(zip(shape_of(x), _elem_strides(x))):
        t.shape[i], t.stride[i] = n, s
    return t


def _np_dtype(name):
    """The numpy dtype of a name; bfloat16 comes from ml_dtypes."""
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            fail("out_dtype: bfloat16 numpy arrays need the ml_dtypes package")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def float_dtype_name(spec, name):
    """'float16', 'bfloat16' or 'float32' from a dtype given as a string ("bfloat16", "torch.float16",
    "f4"), a torch dtype or a numpy dtype (np.float16, ml_dtypes.bfloat16)."""
    t = _torch()
    if t is not None and isinstance(spec, t.dtype):
        got = str(spec).replace("torch.", "")
    elif isinstance(spec, str) and spec.replace("torch.", "") in FLOAT_DTYPES:
        got = spec.replace("torch.", "")
    else:
        try:
            got = np.dtype(spec).name
        except (TypeError, ValueError, AttributeError):  # AttributeError: no numpy (np is None)
            got = None
    if got not in FLOAT_DTYPES:
        fail("%s: %r is not a supported dtype (%s)" % (name, spec, ", ".join(FLOAT_DTYPES)))
    return got


def empty_like(like, shape, dtype=None):
    """An uninitialised contiguous array in like's library and device; dtype (a name) None = like's dtype."""
    if is_torch(like):
        t = _torch()
        dt = like.dtype if dtype is None else getattr(t, dtype)
        return t.empty(shape, dtype=dt, device=like.device)
    return np.empty(shape, dtype=like.dtype if dtype is None else _np_dtype(dtype))


def _check_int32_range(lo, hi, name):
    if lo < -2**31 or hi >= 2**31:
        fail("%s: values do not fit in int32" % name)


def as_int32(x, like, name):
    """An int32 contiguous array in like's library and device, from ints, lists or integer arrays.
    Values in host memory are range-checked; those of a wider CUDA tensor only under the debug switch
    (set_check_errors: reading them synchronises)."""
    x = _maybe_dlpack(x, name)
    if is_torch(like):
        t = _torch()
        x = x if is_torch(x) else t.as_tensor(_native_numpy(x))
        if x.is_floating_point() or x.is_complex() or x.dtype == t.bool:
            fail("%s: expected integers, got dtype %s" % (name, dtype_name(x)))
        on_host = x.device.type == "cpu"
        if x.numel() and x.dtype != t.int32 and (on_host or check_errors_on()):
            w = x.to(dtype=t.int64)
            _check_int32_range(int(w.min()), int(w.max()), name)
        return x.to(device=like.device, dtype=t.int32).contiguous()
    if is_torch(x):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        fail("%s: expected integers, got dtype %s" % (name, a.dtype.name))
    if a.size:
        _check_int32_range(int(a.min()), int(a.max()), name)
    return np.require(a, np.int32, ["C", "A"])


def host_ints(x):
    """The values of an index argument (accepted by as_int32) as a numpy int64 array when they are in
    host memory (an int, a list, a numpy array, a torch CPU tensor), else None: reading a CUDA tensor
    would synchronise. None for None, and without numpy."""
    if x is None or np is None:
        return None
    x = _maybe_dlpack(x, "index")
    if is_torch(x):
        if x.device.type != "cpu":
            return None
        x = x.detach().numpy()
    return np.asarray(x, dtype=np.int64)


def as_float(x, like, name, keep=("float32",)):
    """A float array in like's library and device: as is when its dtype is in keep, else float32."""
    x = _maybe_dlpack(x, name)
    if is_torch(like):
        t = _torch()
        x = x if is_torch(x) else t.as_tensor(_native_numpy(x), dtype=t.float32)
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


def full_int32(like, n, value, name):
    """An int32 (n,) array filled with value (an int that must fit), in like's library and device."""
    _check_int32_range(value, value, name)
    if is_torch(like):
        t = _torch()
        return t.full((n,), int(value), dtype=t.int32, device=like.device)
    return np.full((n,), int(value), dtype=np.int32)


def diff_int32(cu):
    """cu[1:] - cu[:-1] of an int32 array, as a contiguous int32 array of the same library."""
    d = cu[1:] - cu[:-1]
    return d.to(dtype=_torch().int32).contiguous() if is_torch(cu) else np.ascontiguousarray(d, np.int32)


def swap_last(x):
    """A view of x with its last two dimensions swapped."""
    return x.transpose(-1, -2) if is_torch(x) else np.swapaxes(x, -1, -2)


def reshape(x, shape):
    """x reshaped: a view where the strides allow, else a contiguous copy."""
    return x.reshape(shape)


def try_view(x, shape):
    """x reshaped to shape as a view of the same memory, or None where its strides do not allow one."""
    if is_torch(x):
        try:
            return x.view(shape)
        except RuntimeError:
            return None
    y = x.reshape(shape)
    return y if np.may_share_memory(x, y) else None


def assign(dst, src):
    """dst[...] = src, for either library."""
    if is_torch(dst):
        dst.copy_(src)
    else:
        dst[...] = src


def broadcast_scale(x, shape):
    """A float32 array of one element seen as `shape` through zero strides (a per-tensor descale); any
    other array as it is."""
    if _numel(x) != 1:
        return x
    if is_torch(x):
        return x.reshape((1,) * len(shape)).expand(shape)
    return np.broadcast_to(x.reshape((1,) * len(shape)), shape)
