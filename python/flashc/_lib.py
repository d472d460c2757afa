"""_lib.py — loads libflashc.so, mirrors flashc.h's structs and entry points in ctypes, checks scalars for C fields."""
import ctypes
import ctypes.util
import math
import operator
import os
import struct

# Enums of flashc.h (C int).
FC_OK = 0
FC_ERR_INVALID_ARGUMENT = 1
FC_ERR_UNSUPPORTED = 2
FC_ERR_CUDA = 3
FC_ERR_OUT_OF_MEMORY = 4
FC_ERR_NO_DEVICE = 5
FC_ERR_INTERNAL = 6

FC_BF16, FC_FP16, FC_FP32, FC_INT32, FC_E4M3, FC_E5M2 = 0, 1, 2, 3, 4, 5
FC_DEVICE_CPU, FC_DEVICE_CUDA = 0, 1
FC_MAX_DIMS = 4

_STATUS_NAMES = {
    FC_OK: "ok", FC_ERR_INVALID_ARGUMENT: "invalid argument", FC_ERR_UNSUPPORTED: "unsupported",
    FC_ERR_CUDA: "CUDA error", FC_ERR_OUT_OF_MEMORY: "out of memory", FC_ERR_NO_DEVICE: "no device",
    FC_ERR_INTERNAL: "internal error",
}


class FcTensor(ctypes.Structure):
    """fc_tensor: data == NULL means absent; shape and strides in elements."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * FC_MAX_DIMS),
        ("stride", ctypes.c_int64 * FC_MAX_DIMS),
    ]


class FcAttnArgs(ctypes.Structure):
    """fc_attn_args, field for field."""
    _fields_ = [
        ("device", ctypes.c_int),
        ("q", FcTensor), ("k", FcTensor), ("v", FcTensor), ("out", FcTensor),
        ("lse", FcTensor),
        ("cu_seqlens_q", FcTensor), ("cu_seqlens_k", FcTensor),
        ("max_seqlen_q", ctypes.c_int), ("max_seqlen_k", ctypes.c_int),
        ("seqused_k", FcTensor),
        ("page_table", FcTensor),
        ("k_new", FcTensor), ("v_new", FcTensor),
        ("rotary_cos", FcTensor), ("rotary_sin", FcTensor),
        ("rotary_interleaved", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
        ("alibi_slopes", FcTensor), ("sinks", FcTensor),
        ("num_splits", ctypes.c_int),
        ("kv_batch_idx", FcTensor), ("kv_leftpad", FcTensor), ("seqused_q", FcTensor),
        ("k_descale", FcTensor), ("v_descale", FcTensor), ("q_descale", FcTensor),
    ]


class FcMergeArgs(ctypes.Structure):
    """fc_merge_args, field for field."""
    _fields_ = [
        ("device", ctypes.c_int),
        ("out_partial", FcTensor), ("lse_partial", FcTensor),
        ("out", FcTensor), ("lse", FcTensor),
    ]


class FlashcError(RuntimeError):
    """A flashc call failed: .status (fc_status int), .status_string, .message (fc_last_error)."""

    def __init__(self, status, message, status_string=None):
        self.status = status
        self.status_string = status_string or _STATUS_NAMES.get(status, "status %d" % status)
        self.message = message
        super().__init__("%s: %s" % (self.status_string, message))


def _candidates():
    """Where to look for the library, in order."""
    env = os.environ.get("FLASHC_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, "libflashc.so"),  # installed by pip (setup.py puts it in the package)
             os.path.normpath(os.path.join(here, "..", "..", "build", "libflashc.so"))]  # the source tree
    found = ctypes.util.find_library("flashc")
    if found:
        paths.append(found)
    return paths


def _declare(lib):
    """Sets argtypes/restype of every entry point."""
    P = ctypes.POINTER
    sigs = {
        "fc_status_string": (ctypes.c_char_p, [ctypes.c_int]),
        "fc_last_error": (ctypes.c_char_p, []),
        "fc_version": (ctypes.c_char_p, []),
        "fc_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
        "fc_attn_args_init": (None, [P(FcAttnArgs)]),
        "fc_attn_workspace_size": (ctypes.c_int, [P(FcAttnArgs), P(ctypes.c_size_t)]),
        "fc_attn_fwd": (ctypes.c_int, [P(FcAttnArgs), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]),
        "fc_merge_states": (ctypes.c_int, [P(FcMergeArgs), ctypes.c_void_p]),
        "fc_cuda_available": (ctypes.c_int, []),
        "fc_set_num_threads": (ctypes.c_int, [ctypes.c_int]),
        "fc_get_num_threads": (ctypes.c_int, []),
        "fc_check_errors": (ctypes.c_int, [ctypes.c_void_p]),
        "fc_plan_create": (ctypes.c_int, [P(FcAttnArgs), P(ctypes.c_void_p)]),
        "fc_plan_workspace_size": (ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_size_t)]),
        "fc_plan_run": (ctypes.c_int, [ctypes.c_void_p, P(FcAttnArgs), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]),
        "fc_plan_destroy": (None, [ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


_LIB = None


def lib():
    """The loaded library (loaded on first use, so importing flashc never fails)."""
    global _LIB
    if _LIB is None:
        errors = []
        for path in _candidates():
            try:
                _LIB = _declare(ctypes.CDLL(path))
                break
            except (OSError, AttributeError) as e:
                errors.append("%s: %s" % (path, e))
        if _LIB is None:
            raise OSError("flashc: cannot load libflashc.so (set FLASHC_LIB or build with `make`): "
                          + "; ".join(errors or ["not found"]))
    return _LIB


def map_name(message, names):
    """The message with its leading C argument ("k: ...") replaced by names[C argument], if there."""
    arg, sep, why = message.partition(":")
    if sep and names and arg in names:
        return names[arg] + sep + why
    return message


def check(status, names=None):
    """Raises FlashcError for any status other than FC_OK. names maps the C argument that a message
    starts with ("k: ...") to the Python argument it came from ("k_cache: ...")."""
    if status != FC_OK:
        L = lib()
        message = map_name(L.fc_last_error().decode(errors="replace"), names)
        raise FlashcError(status, message, L.fc_status_string(status).decode(errors="replace"))


def fail(message, status=FC_ERR_INVALID_ARGUMENT):
    """Raises FlashcError for an argument the binding itself rejects ("arg: why")."""
    raise FlashcError(status, message)


# Checked conversions into the C fields of fc_attn_args: ctypes would silently wrap an int that does not
# fit a C int (2**32 becomes 0) and round a float outside float32's range to 0 or inf.
C_INT_MIN, C_INT_MAX = -2**31, 2**31 - 1
FLT_MIN, FLT_MAX = 2.0**-126, 3.4028234663852886e38  # smallest normal and largest finite float32


def c_int(value, name):
    """value as a C int; FlashcError naming the argument if it is not an integer or does not fit."""
    try:
        n = operator.index(value)
    except TypeError:
        fail("%s: expected an integer, got %s %r" % (name, type(value).__name__, value))
    if not C_INT_MIN <= n <= C_INT_MAX:
        fail("%s: = %d does not fit in a C int [-2^31, 2^31)" % (name, n))
    return n


def _as_float32(x):
    """x rounded to float32; inf where it overflows (as the C conversion does)."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(float("inf"), x)


def c_float(value, name):
    """value as a float that float32 holds without becoming 0 or inf; NaN and inf pass (the C API
    rejects them); FlashcError naming the argument otherwise."""
    if isinstance(value, (str, bytes)):
        fail("%s: expected a number, got %s %r" % (name, type(value).__name__, value))
    try:
        x = float(value)
    except (TypeError, ValueError):
        fail("%s: expected a number, got %s %r" % (name, type(value).__name__, value))
    if math.isfinite(x) and x != 0 and not FLT_MIN <= abs(_as_float32(x)) <= FLT_MAX:
        fail("%s: = %r is outside float32's range: it must be 0 or %.3g <= |x| <= %.4g" % (name, x, FLT_MIN, FLT_MAX))
    return x


def _env_on(value):
    """An environment switch: on unless unset, empty or "0"."""
    return value not in (None, "", "0")


# The debug switch of check_errors: FLASHC_CHECK_ERRORS, read once at import; set_check_errors changes it.
_check_errors_on = _env_on(os.environ.get("FLASHC_CHECK_ERRORS"))


def check_errors_on():
    return _check_errors_on


def set_check_errors_on(on):
    """Sets the switch; returns its previous value."""
    global _check_errors_on
    before, _check_errors_on = _check_errors_on, bool(on)
    return before
