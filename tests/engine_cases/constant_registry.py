"""A registry keyed by constants (a module-level dict of classes), looked up with a constant key."""


class TritonBackend:
    name = "triton"


class CutlassBackend:
    name = "cutlass"


BACKENDS = {"triton": TritonBackend, "cutlass": CutlassBackend}


# expect: 'cutlass'
def case_lookup():
    return BACKENDS["cutlass"].name


# expect: 'triton'
def case_class_attribute():
    return TritonBackend.name
