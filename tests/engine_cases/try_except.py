"""A raise inside a called function, caught by the ``except`` around the call (a config reader's
``get_from_keys_or``: the first key present, else the default)."""


def _from_keys(config, keys):
    for key in keys:
        if key in config:
            return config[key]
    raise ValueError(f"Cannot find any of {keys}")


def _from_keys_or(config, keys, default):
    try:
        return _from_keys(config, keys)
    except ValueError:
        return default


# expect: None
def case_missing_key_gives_the_default():
    return _from_keys_or({"quant_method": "fp8"}, ["ignored_layers", "modules_to_not_convert"], None)


# expect: ['lm_head']
def case_present_key_gives_its_value():
    return _from_keys_or({"modules_to_not_convert": ["lm_head"]}, ["ignored_layers", "modules_to_not_convert"], None)


# expect: 'unknown'
def case_a_handler_that_does_not_catch_it():
    try:
        return _from_keys({}, ["x"])
    except KeyError:
        return "caught"


# expect: 'caught'
def case_a_base_class_catches_it():
    try:
        return _from_keys({}, ["x"])
    except Exception:
        return "caught"


# expect: 'else ran'
def case_else_runs_without_a_raise():
    try:
        found = _from_keys({"x": 1}, ["x"])
    except ValueError:
        return "caught"
    else:
        return "else ran" if found == 1 else "wrong"
