"""A value an object holds on self: the write in __init__ is what a later read sees."""


class Holder:
    def __init__(self):
        self.backend = "triton"


# expect: 'triton'
def case_held():
    return Holder().backend


# expect: 'triton'
def case_held_through_local():
    h = Holder()
    return h.backend
