"""flashc — ctypes binding of libflashc: flash_attn-compatible attention on numpy arrays and torch tensors."""
from ._attention import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, merge_states
from ._lib import FlashcError, check as _check, lib as _lib

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "merge_states",
           "FlashcError", "version", "cuda_available", "set_num_threads", "get_num_threads"]


def version():
    """The library's version string, e.g. "0.1.0"."""
    return _lib().fc_version().decode()


def cuda_available():
    """True if the library was built with CUDA kernels and a CUDA device is visible."""
    return bool(_lib().fc_cuda_available())


def set_num_threads(n):
    """Worker threads of the CPU backend (n >= 1); 0 restores the default (FLASHC_NUM_THREADS or all cores)."""
    _check(_lib().fc_set_num_threads(int(n)))


def get_num_threads():
    """Worker threads the CPU backend uses now."""
    return int(_lib().fc_get_num_threads())
