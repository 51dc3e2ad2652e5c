"""A second module whose globals a compiled function writes (STORE_GLOBAL across modules)."""
VALUE = 0


def update(v):
    global VALUE
    VALUE = v
