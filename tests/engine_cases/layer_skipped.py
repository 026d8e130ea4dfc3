"""A quant config that chooses per named layer: ``get_quant_method(layer, prefix)`` with the
checkpoint's ignored layers normalized in ``from_config`` (with and without ``model.``)."""


def _skipped(prefix, ignored_layers):
    return any(prefix == i or prefix.startswith(i + ".") for i in ignored_layers)


class Config:
    def __init__(self, ignored_layers=None):
        self.ignored_layers = ignored_layers or []

    @classmethod
    def from_config(cls, config):
        ignored = config.get("modules_to_not_convert")
        if ignored:
            normalized = []
            for layer in ignored:
                base = layer.removeprefix("model.")
                normalized.append(base)
                normalized.append(f"model.{base}")
            ignored = normalized
        return cls(ignored_layers=ignored)

    def get_quant_method(self, layer, prefix):
        if _skipped(prefix, self.ignored_layers):
            return "UnquantizedFusedMoEMethod"
        return "Fp8MoEMethod"


CHECKPOINT = {"quant_method": "fp8", "modules_to_not_convert": ["layers.3.mlp.experts"]}


# expect: 'UnquantizedFusedMoEMethod'
def case_the_ignored_layer():
    return Config.from_config(CHECKPOINT).get_quant_method(None, "model.layers.3.mlp.experts")


# expect: 'Fp8MoEMethod'
def case_another_layer():
    return Config.from_config(CHECKPOINT).get_quant_method(None, "model.layers.4.mlp.experts")


# expect: 'Fp8MoEMethod'
def case_no_ignored_layers():
    return Config.from_config({"quant_method": "fp8"}).get_quant_method(None, "model.layers.3.mlp.experts")
