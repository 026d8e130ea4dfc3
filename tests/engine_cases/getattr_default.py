"""getattr with a default: the default when the object has no such attribute, else the value."""


class Holder:
    def __init__(self):
        self.present = 3


# expect: 7
def case_missing():
    return getattr(Holder(), "missing", 7)


# expect: 3
def case_present():
    return getattr(Holder(), "present", 7)
