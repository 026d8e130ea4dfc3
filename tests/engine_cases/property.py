"""A @property read on an object: its body runs and its return value is the attribute."""


class Holder:
    def __init__(self):
        self.backend = "triton"

    @property
    def kind(self):
        return "fast" if self.backend == "triton" else "slow"


# expect: 'fast'
def case_property():
    return Holder().kind
