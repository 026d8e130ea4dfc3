"""A container changed in place (``append``, ``extend``, ``update``) is read as changed, here and on
an object (``self.ignored_layers.extend(...)`` in a constructor, under a test that is decided)."""


class Config:
    def __init__(self, ignored=None, extra=""):
        self.ignored = ignored or []
        if extra_names := extra:
            self.ignored.extend([n.strip() for n in extra_names.split(",") if n.strip()])


# expect: ['a', 'model.a', 'b', 'model.b']
def case_loop_appends():
    normalized = []
    for layer in ["model.a", "b"]:
        base = layer.removeprefix("model.")
        normalized.append(base)
        normalized.append(f"model.{base}")
    return normalized


# expect: {'x': 1, 'y': 2}
def case_update_and_dict():
    d = dict(x=1)
    d.update({"y": 2})
    return d


# expect: []
def case_object_list_not_extended():
    return Config().ignored


# expect: ['lm_head', 'mlp.gate']
def case_object_list_extended():
    return Config(["lm_head"], "mlp.gate, ").ignored
