"""A gate memoized with functools.lru_cache, and a callable made by functools.partial."""

import functools
from functools import partial


@functools.lru_cache(maxsize=1)
def is_enabled():
    return True


def scaled(x, factor):
    return x * factor


# expect: 'on'
def case_cached_gate():
    return "on" if is_enabled() else "off"


# expect: 6
def case_partial():
    f = partial(scaled, 3)
    return f(2)
