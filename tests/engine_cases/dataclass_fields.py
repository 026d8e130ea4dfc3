"""A dataclass built with keyword and positional arguments: each field is what the constructor was
given (no __init__ in the tree to read), its declared default otherwise."""

from dataclasses import dataclass
from typing import Optional


@dataclass
class QuantInfo:
    weight: str
    global_scale: Optional[str] = None
    mode: str = "plain"


# expect: 'ones'
def case_keyword_field():
    info = QuantInfo("w", global_scale="ones")
    return info.global_scale


# expect: 'w'
def case_positional_field():
    return QuantInfo("w").weight


# expect: 'plain'
def case_default_field():
    return QuantInfo("w").mode
