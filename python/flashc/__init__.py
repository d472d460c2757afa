"""flashc — ctypes binding of libflashc: flash_attn-compatible attention on numpy arrays and torch tensors."""
import sys as _sys

from ._attention import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, merge_states, plan
from ._attention import register_torch_ops
from ._plan import Plan, clear_cache as _clear_plan_cache
from ._version import __version__
from ._call import check_errors as _check_errors
from ._lib import FlashcError, c_int as _c_int, check as _check, check_errors_on as _check_errors_on
from ._lib import lib as _lib, set_check_errors_on as _set_check_errors_on

__all__ = ["__version__", "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "merge_states", "plan", "Plan",
           "FlashcError", "register_torch_ops", "version", "cuda_available", "set_num_threads", "get_num_threads",
           "check_errors", "set_check_errors", "get_check_errors"]


def version():
    """The library's version string, e.g. "0.1.0"."""
    return _lib().fc_version().decode()


def cuda_available():
    """True if the library was built with CUDA kernels and a CUDA device is visible."""
    return bool(_lib().fc_cuda_available())


def set_num_threads(n):
    """Worker threads of the CPU backend (n >= 1); 0 restores the default (FLASHC_NUM_THREADS or all cores)."""
    _check(_lib().fc_set_num_threads(_c_int(n, "n")))


def get_num_threads():
    """Worker threads the CPU backend uses now."""
    return int(_lib().fc_get_num_threads())


def check_errors(stream=None):
    """Raises FlashcError if a CUDA kernel found bad device-side contents since the last check.

    On CUDA the kernels check the lengths, offsets and page indices held in device tensors (cu_seqlens,
    seqused_k / cache_seqlens, block_table; the key counts, cache capacities and rotary positions they
    imply) as they run, stay inside every tensor, and record the first error of the device. This waits
    for the stream (default: torch's current stream on torch's current device; or a torch.cuda.Stream or
    an int cudaStream_t handle), then reads and clears that device's record. The message names the
    Python argument where the CUDA calls since the last check agree on it (page_table: block_table),
    else the C argument of flashc.h. Returns None when nothing was recorded, at once on the CPU (whose
    calls check the contents before they run and raise then). See set_check_errors for a check after
    every call."""
    _check_errors(stream)


def set_check_errors(on):
    """Turns the debug switch on or off; returns its previous setting. On: every CUDA call of the binding
    (attention and merge_states) waits for its stream after the launch and calls check_errors, so a bad
    device-side length raises from the call that was given it (one synchronisation per call). Off by
    default; the environment variable FLASHC_CHECK_ERRORS=1 (read at import) turns it on."""
    return _set_check_errors_on(on)


def get_check_errors():
    """The debug switch of set_check_errors."""
    return _check_errors_on()


if "torch" in _sys.modules:  # torch was imported first: its custom ops are registered now (torch.compile)
    register_torch_ops()
