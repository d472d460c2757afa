"""_call.py — builds one fc_attn_args / fc_merge_args call, keeps its arrays alive, runs it on CPU or CUDA."""
import ctypes
import sys
import threading

from . import _arrays as A
from ._lib import (FC_DEVICE_CPU, FC_DEVICE_CUDA, FcAttnArgs, FcMergeArgs, c_int, check, check_errors_on, fail,
                   lib)


def _fc_device(dev, name):
    if dev[0] == "cpu":
        return FC_DEVICE_CPU
    if dev[0] == "cuda":
        return FC_DEVICE_CUDA
    fail("%s: tensors on device type %r are not supported (cpu or cuda)" % (name, dev[0]))


class Call:
    """One C call: tensors are set by field name; every array set is referenced until the call is done."""

    def __init__(self, first, first_name, struct):
        self.dev = A.device_of(first)
        self.first_name = first_name
        self.keep = []
        self.names = {}  # C field -> the Python argument it came from (for error messages)
        self.arrays = {}  # C field -> the array it points to
        self.args = struct()
        self.args.device = _fc_device(self.dev, first_name)

    def set(self, field, x, name=None):
        """Points field at array x (None leaves the field absent)."""
        if x is None:
            return
        name = name or field
        if A.device_of(x) != self.dev:
            fail("%s: is on %s but %s is on %s" % (name, _dev_str(A.device_of(x)), self.first_name,
                                                    _dev_str(self.dev)))
        self.keep.append(x)
        self.arrays[field] = x
        self.names[field] = name
        setattr(self.args, field, A.to_fc(x, name))

    def set_many(self, **arrays):
        """set() for each field=array whose Python name is the C field name."""
        for field, x in arrays.items():
            self.set(field, x)

    def set_int(self, field, value, name=None):
        """Sets a C int field, range-checked (ctypes would wrap 2**32 to 0)."""
        name = name or field
        self.names[field] = name
        setattr(self.args, field, c_int(value, name))

    def _cuda(self):
        torch = sys.modules["torch"]
        return torch, torch.cuda.device(self.dev[1])

    def run_attn(self):
        L = lib()
        if self.args.device == FC_DEVICE_CPU:
            check(L.fc_attn_fwd(ctypes.byref(self.args), None, 0, None), self.names)
            return
        torch, device_ctx = self._cuda()
        with device_ctx:
            size = ctypes.c_size_t(0)
            check(L.fc_attn_workspace_size(ctypes.byref(self.args), ctypes.byref(size)), self.names)
            ws = torch.empty(size.value, dtype=torch.uint8, device=self.dev_str()) if size.value else None
            stream = torch.cuda.current_stream().cuda_stream
            check(L.fc_attn_fwd(ctypes.byref(self.args), ws.data_ptr() if ws is not None else None,
                                size.value, stream), self.names)
            self._launched(stream)

    def run_merge(self):
        L = lib()
        if self.args.device == FC_DEVICE_CPU:
            check(L.fc_merge_states(ctypes.byref(self.args), None), self.names)
            return
        torch, device_ctx = self._cuda()
        with device_ctx:
            stream = torch.cuda.current_stream().cuda_stream
            check(L.fc_merge_states(ctypes.byref(self.args), stream), self.names)
            self._launched(stream)

    def _launched(self, stream):
        """After a CUDA launch (inside the device's context): remembers the call's argument names for
        check_errors; with the debug switch on, waits for the stream and raises what the kernels found."""
        note_launch(self.dev[1], self.names)
        if check_errors_on():
            check_device(self.dev[1], stream)

    def dev_str(self):
        return _dev_str(self.dev)


def _dev_str(dev):
    return dev[0] if dev[1] is None else "%s:%d" % dev


def attn_call(q):
    """A Call filling fc_attn_args (initialised by fc_attn_args_init), on q's device."""
    c = Call(q, "q", FcAttnArgs)
    device = c.args.device
    lib().fc_attn_args_init(ctypes.byref(c.args))
    c.args.device = device
    return c


def merge_call(out_partial):
    return Call(out_partial, "out_partial", FcMergeArgs)


# ------------------------------------------------------------------------------------------------
# Device-side errors. The device record holds the first error of any call since the last check, so its
# C argument name ("page_table: ...") is mapped to the Python one through the names of every CUDA call
# launched on that device since then: where they all agree (page_table is block_table in every entry
# point) the Python name is used, where they differ (seqused_k is cache_seqlens in
# flash_attn_with_kvcache, seqused_k or cu_seqlens_k in flash_attn_varlen_func) the C name stays.

_pending_lock = threading.Lock()
_pending = {}  # CUDA device index -> {C name: {Python names}} of the calls launched since its last check
_noted = {}  # CUDA device index -> the names merged last (a plan's runs pass the same dict: merged once)


def note_launch(index, names):
    if _noted.get(index) is names:  # the common case, a plan run again: nothing new (no lock: a race
        return  # with a check only loses the Python names of this launch, and the C names stay)
    with _pending_lock:
        seen = _pending.setdefault(index, {})
        for field, name in names.items():
            seen.setdefault(field, set()).add(name)
        _noted[index] = names


def _take_names(index):
    """The C -> Python names that every call since the device's last check agrees on; forgets them."""
    with _pending_lock:
        seen = _pending.pop(index, {})
        _noted.pop(index, None)
    return {field: next(iter(names)) for field, names in seen.items() if len(names) == 1}


def check_device(index, stream):
    """fc_check_errors on the current CUDA device (index, for the names) and stream: waits for the stream,
    raises FlashcError naming the Python argument if a kernel recorded an error."""
    status = lib().fc_check_errors(stream)
    check(status, _take_names(index))


def _stream_handle(stream):
    """A cudaStream_t from None (the default stream), an int handle, or a torch.cuda.Stream."""
    if stream is None or isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if not isinstance(handle, int):
        fail("stream: expected None, an int handle or a torch.cuda.Stream, got %s" % type(stream).__name__)
    return handle


def check_errors(stream=None):
    """Waits for the stream and raises FlashcError if a kernel recorded an error (see flashc.check_errors)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        index = torch.cuda.current_device()
        with torch.cuda.device(index):
            handle = torch.cuda.current_stream().cuda_stream if stream is None else _stream_handle(stream)
            check_device(index, handle)
    else:
        check_device(None, _stream_handle(stream))
