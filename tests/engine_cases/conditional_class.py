"""A class picked by a conditional expression on a module constant, then constructed."""

USE_FAST = True


class Fast:
    def __init__(self):
        self.name = "fast"


class Slow:
    def __init__(self):
        self.name = "slow"


# expect: 'fast'
def case_pick():
    cls = Fast if USE_FAST else Slow
    return cls().name


# expect: 'fast'
def case_value_by_condition():
    return "fast" if USE_FAST else "slow"


# expect: 'slow'
def case_attribute_of_the_pick():
    return (Fast if not USE_FAST else Slow)().name


def _unknown():
    import os
    return os.cpu_count() > 1000


# expect: 'unknown'  (the engine's UNKNOWN: the two classes differ)
def case_undecided_pick_differs():
    cls = Fast if _unknown() else Slow
    return cls().name
