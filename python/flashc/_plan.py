"""_plan.py — Plan: a call validated and planned once in C (fc_plan_create), then run with new tensors for
the cost of writing their addresses into the planned fc_attn_args; and the cache of plans by call
signature that puts the flash_attn-style functions on the same path."""
import ctypes
import functools
import sys
import threading

from . import _arrays as A
from ._call import check_device, note_launch
from ._lib import FC_DEVICE_CPU, check, check_errors_on, fail, lib


def signature(x):
    """(layout, address) of an argument the fast path takes as it is: a torch tensor or a numpy array
    (layout: shape, strides, dtype, device, and the address modulo 16, on which the binding's copies
    depend), None for None; False for anything else (an int, a list: the slow path converts those)."""
    if x is None:
        return None, 0
    if type(x) is _Tensor:
        p = x.data_ptr()
        return (x.shape, x.stride(), x.dtype, x.device, p & 15), p or A.EMPTY_ADDRESS
    if type(x) is _ndarray:
        p = x.__array_interface__["data"][0]
        return (x.shape, x.strides, x.dtype, x.flags.writeable, p & 15), p or A.EMPTY_ADDRESS
    if _Tensor is None and A.is_torch(x):  # torch imported after flashc's first call
        _find_types()
        return signature(x)
    return False, 0


_Tensor = _ndarray = None  # torch.Tensor and numpy.ndarray where imported (type(x) is ... is the fast test)


def _find_types():
    global _Tensor, _ndarray
    _Tensor = A.tensor_type()
    _ndarray = None if A.np is None else A.np.ndarray
    attention = sys.modules.get("flashc._attention")
    if _Tensor is not None and attention is not None and hasattr(attention, "register_torch_ops"):
        attention.register_torch_ops()  # torch imported after flashc: its ops, at the first torch call


_find_types()


def _layout(sig):
    """A signature without the address bits: what a plan's run requires of a tensor."""
    return None if sig is None else sig[:4]


def _describe(x):
    if A.is_torch(x):
        return "shape %s, strides %s, %s on %s" % (tuple(x.shape), tuple(x.stride()), x.dtype, x.device)
    return "shape %s, strides %s, %s" % (x.shape, x.strides, x.dtype)


class Plan:
    """A call planned once (see flashc.plan). run() takes the tensors of `slots`, each with the layout
    it had at plan time (shape, strides, dtype, device), writes their addresses into the planned
    arguments and calls fc_plan_run, which checks everything else in C (alignment, overlap, contents on
    the CPU). out and lse are allocated per run unless given."""

    def __init__(self, call, slots, tensors, out, lse, result, keep=False):
        """call: a Call with every argument set (out and lse too); slots: the C fields run() rebinds, in
        order; tensors: the arrays they held; out, lse: the planned outputs (lse None: not computed);
        result: (out, lse) -> what run() returns; keep: hold the arrays of the other fields (flashc.plan:
        they are read by every run), else every field is a slot and nothing is held."""
        L = lib()
        self._handle = ctypes.c_void_p()
        check(L.fc_plan_create(ctypes.byref(call.args), ctypes.byref(self._handle)), call.names)
        self._destroy = L.fc_plan_destroy
        self._run = L.fc_plan_run
        self._args = call.args
        self._ref = ctypes.byref(call.args)
        self._names = call.names
        self._views = [getattr(call.args, f) for f in slots] + [call.args.out, call.args.lse]
        self._layouts = tuple(_layout(signature(x)[0]) for x in tensors)
        self._slot_names = [call.names.get(f, f) for f in slots]
        self._inplace = [f in ("k", "v") and bool(call.args.k_new.data) for f in slots]  # the cache of an append
        size = ctypes.c_size_t(0)
        check(L.fc_plan_workspace_size(self._handle, ctypes.byref(size)), call.names)
        self._ws_bytes = size.value
        self._out_layout = _layout(signature(out)[0])
        self._lse_layout = None if lse is None else _layout(signature(lse)[0])
        self._new_out = _allocator(out)
        if self._ws_bytes:  # per run (a plan may run on several streams at once), in out's device
            torch = sys.modules["torch"]
            self._new_workspace = functools.partial(torch.empty, self._ws_bytes, dtype=torch.uint8, device=out.device)
        self._new_lse = None if lse is None else _allocator(lse)
        self._result = result
        self._cuda = call.args.device != FC_DEVICE_CPU
        self._device_index = call.dev[1]
        self._keep = [x for f, x in call.arrays.items() if f not in slots and f not in ("out", "lse")] if keep else None
        self._lock = threading.Lock()

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            self._destroy(handle)

    def launch(self, addresses, out, lse):
        """Runs with the slots at addresses (already checked against the plan) into out and lse (None:
        allocated). Returns what the entry point returns."""
        if out is None:
            out = self._new_out()
        if lse is None and self._new_lse is not None:
            lse = self._new_lse()
        addresses.append(signature(out)[1])
        addresses.append(0 if lse is None else signature(lse)[1])
        if not self._cuda:
            with self._lock:
                for view, a in zip(self._views, addresses):
                    view.data = a
                check(self._run(self._handle, self._ref, None, 0, None), self._names)
            return self._result(out, lse)
        torch = sys.modules["torch"]
        index = self._device_index
        if torch.cuda.current_device() != index:
            with torch.cuda.device(index):
                return self.launch(addresses[:-2], out, lse)
        ws = self._new_workspace() if self._ws_bytes else None
        stream = _current_stream(torch, index)
        with self._lock:
            for view, a in zip(self._views, addresses):
                view.data = a
            check(self._run(self._handle, self._ref, None if ws is None else ws.data_ptr(), self._ws_bytes, stream),
                  self._names)
        note_launch(index, self._names)
        if check_errors_on():
            check_device(index, stream)
        return self._result(out, lse)

    def run(self, *tensors, out=None, lse=None):
        """Runs the plan on new tensors of the planned layouts (the per-layer arguments, in the entry
        point's order: e.g. q, k_cache, v_cache[, k, v]); out= / lse= write into the caller's arrays."""
        if len(tensors) > len(self._layouts):
            fail("run: takes %d arrays (%s), got %d" % (len(self._layouts), ", ".join(self._slot_names), len(tensors)))
        tensors = tensors + (None,) * (len(self._layouts) - len(tensors))
        addresses, copies = [], []  # copies: held until the call is done
        for x, want, name, inplace in zip(tensors, self._layouts, self._slot_names, self._inplace):
            if (type(x) is _Tensor and want is not None and x.shape == want[0] and x.stride() == want[1] and
                    x.dtype == want[2] and x.device == want[3]):  # the common case, without building a signature
                addresses.append(x.data_ptr() or A.EMPTY_ADDRESS)
                continue
            sig, address = signature(x)
            if _layout(sig) != want and x is not None and not inplace and A.is_array(x):
                copies.append(A.as_data(x, name))  # what the binding copied at plan time, it copies here
                sig, address = signature(copies[-1])
            if _layout(sig) != want:
                self._mismatch(x, want, name)
            addresses.append(address)
        for x, want, name in ((out, self._out_layout, "out"), (lse, self._lse_layout, "lse")):
            if x is not None and _layout(signature(x)[0]) != want:
                self._mismatch(x, want, name)
        return self.launch(addresses, out, lse)

    @staticmethod
    def _mismatch(x, want, name):
        if want is None:
            fail("%s: the plan was made without it, so run() takes None" % name)
        if x is None:
            fail("%s: the plan was made with it, so run() needs it" % name)
        fail("%s: %s differs from the plan's layout (shape %s, strides %s, %s)" % (name, _describe(x), tuple(want[0]),
                                                                                  tuple(want[1]), want[2]))


def _current_stream(torch, index):
    """The cudaStream_t of torch's current stream on device index (torch's internal accessor when it has
    one: a tenth of the cost of torch.cuda.current_stream)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


def capturing(device):
    """True while torch captures a CUDA graph on the current stream (device: a Call's C device)."""
    if device == FC_DEVICE_CPU:
        return False
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_current_stream_capturing()


def _allocator(x):
    """A function returning a new uninitialised contiguous array of x's shape, dtype, library and device
    (torch: empty_like of a one-element broadcast view, the fastest allocation torch has, holding no memory)."""
    if A.is_torch(x):
        torch = sys.modules["torch"]
        like = torch.empty(1, dtype=x.dtype, device=x.device).expand(x.shape)
        return functools.partial(torch.empty_like, like, memory_format=torch.contiguous_format)
    return functools.partial(A.np.empty, x.shape, x.dtype)


# ------------------------------------------------------------------------------------------------
# The flash_attn-style functions' cache: a call whose tensors all pass as they are (no copy, no
# conversion: the slow path's first call shows which do) and whose scalars are hashable gets a plan
# keyed by its signature; later calls of that signature only write addresses and run.

_CACHE_SIZE = 256
_cache = {}  # key -> Plan, or False: this signature needs the slow path (emptied when full)
_full_cache = {}  # (value, b, device) -> int32 (b,) filled with value: an int cache_seqlens on the fast path


def full_int32(value, b, like):
    """An int32 (b,) array of value in like's library and device, made once per (value, b, device)."""
    key = (value, b, type(like), getattr(like, "device", None))
    t = _full_cache.get(key)
    if t is None and type(like) is _Tensor and like.is_cuda and capturing(1):
        return A.full_int32(like, b, value, "cache_seqlens")  # made in the graph's memory pool: not kept
    if t is None:
        if len(_full_cache) > 256:
            _full_cache.clear()
        t = _full_cache[key] = A.full_int32(like, b, value, "cache_seqlens")
    return t


def lookup(scalars, tensors):
    """(plan, addresses of the tensors present, key) for a call of this signature; plan None when it is
    not cached yet, False when this signature takes the slow path. None when the call cannot take the
    fast path at all (an unhashable scalar, an argument that is not an array or None)."""
    sigs, addresses = [], []
    for x in tensors:
        if type(x) is _Tensor:  # signature(), inlined: this loop is most of a cached call's cost
            p = x.data_ptr()
            sigs.append((x.shape, x.stride(), x.dtype, x.device, p & 15))
            addresses.append(p or A.EMPTY_ADDRESS)
        elif x is None:
            sigs.append(None)
        else:
            sig, p = signature(x)
            if sig is False:
                return None
            sigs.append(sig)
            addresses.append(p)
    key = (scalars, tuple(sigs))
    try:
        return _cache.get(key), addresses, key
    except TypeError:  # an unhashable scalar (a list window_size, ...)
        return None


def learn(key, call, slots, tensors, out, lse, result):
    """After the slow path ran call: caches a plan for key if every tensor went to the C call as it is.
    The plan's slots are the fields of the tensors present (those absent are absent for every call with
    this key), in lookup's order of addresses."""
    present = []
    for field, x in zip(slots, tensors):
        held = getattr(call.args, field).data or 0
        if (x is None and held) or (x is not None and held != signature(x)[1]):
            plan = False  # copied or converted: this signature keeps the slow path
            break
        if x is not None:
            present.append((field, x))
    else:
        if capturing(call.args.device):
            return  # a plan made while capturing would hold memory of the graph's pool: learn it outside
        plan = Plan(call, [f for f, _ in present], [x for _, x in present], out, lse, result)
    if len(_cache) >= _CACHE_SIZE:
        _cache.clear()
    _cache[key] = plan


def clear_cache():
    """Forgets every cached plan (tests; or after changing the CPU thread count, which plans read)."""
    _cache.clear()
    _full_cache.clear()
