"""Torch function and dispatch modes that record what they see: the tests that
check an eager call reaches the dispatcher's op (test_cpu.py, test_seam.py)."""
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


class _Seen:
    """Records the functions a mode sees."""

    def __init__(self):
        self.funcs = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


class FunctionMode(_Seen, TorchFunctionMode):
    pass


class DispatchMode(_Seen, TorchDispatchMode):
    pass
