"""_call.py — builds one fc_attn_args / fc_merge_args call, keeps its arrays alive, runs it on CPU or CUDA."""
import ctypes
import sys

from . import _arrays as A
from ._lib import FC_DEVICE_CPU, FC_DEVICE_CUDA, FcAttnArgs, FcMergeArgs, check, fail, lib


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
        self.names = {}  # C field -> Python argument, where they differ (for error messages)
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
        if name != field:
            self.names[field] = name
        setattr(self.args, field, A.to_fc(x, name))

    def set_many(self, **arrays):
        """set() for each field=array whose Python name is the C field name."""
        for field, x in arrays.items():
            self.set(field, x)

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

    def run_merge(self):
        L = lib()
        if self.args.device == FC_DEVICE_CPU:
            check(L.fc_merge_states(ctypes.byref(self.args), None), self.names)
            return
        torch, device_ctx = self._cuda()
        with device_ctx:
            check(L.fc_merge_states(ctypes.byref(self.args), torch.cuda.current_stream().cuda_stream), self.names)

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
