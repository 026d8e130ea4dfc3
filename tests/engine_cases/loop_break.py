"""A loop over a known tuple that breaks on the first match (a lazy dispatch's method search)."""

ORDER = ("forward_hip", "forward_cuda", "forward_native")


# expect: 'forward_cuda'
def case_first_match():
    found = None
    for name in ORDER:
        if name.endswith("cuda"):
            found = name
            break
    return found
