"""Globals and helpers of another module, for test_modules.py (PyTorch's test_functions)."""
_variable = 0


def constant3(a, b):
    return a - b + (1.0 + 2)


def update_global(x):
    global _variable
    _variable += 1
    return x * _variable
