"""A class picked by a conditional expression on a module constant, then constructed."""

USE_FAST = True


class Fast:
    def __init__(self):
        self.name = "fast"


class Slow:
    def __init__(self):
        self.name = "slow"


# todo: 'fast'
def case_pick():
    cls = Fast if USE_FAST else Slow
    return cls().name


# expect: 'fast'
def case_value_by_condition():
    return "fast" if USE_FAST else "slow"
