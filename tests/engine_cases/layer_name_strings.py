"""Reading a layer's name: str methods, negative indexes, f-strings, ``any`` over a list, an
``assert`` that holds, the walrus (a quant config's ``is_layer_skipped(prefix, ignored_layers)``)."""

from types import MappingProxyType

FALLBACK = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def is_skipped(prefix, ignored_layers, fused_mapping=MappingProxyType({})):
    proj_name = prefix.split(".")[-1]
    effective = fused_mapping if proj_name in fused_mapping else FALLBACK
    if proj_name in effective:
        shards = [prefix.replace(proj_name, s) for s in effective[proj_name]]
        skipped = None
        for shard in shards:
            one = any(shard.startswith(i) for i in ignored_layers)
            if skipped is None:
                skipped = one
            elif one != skipped:
                raise ValueError(f"some shards of {prefix} are skipped")
    else:
        skipped = any(prefix.startswith(i) for i in ignored_layers)
        if "experts" in prefix:
            skipped = skipped or any(prefix in n for n in ignored_layers if "experts" in n)
    assert skipped is not None
    return skipped


# expect: 'experts'
def case_last_part_of_a_name():
    return "model.layers.3.mlp.experts".split(".")[-1]


# expect: 'model.layers.3.mlp'
def case_f_string_and_removeprefix():
    base = "model.layers.3.mlp".removeprefix("model.")
    return f"model.{base}"


# expect: False
def case_experts_not_skipped_with_no_ignored_layers():
    return is_skipped("model.layers.3.mlp.experts", [])


# expect: True
def case_fused_shards_all_skipped():
    return is_skipped("model.layers.3.self_attn.qkv_proj", ["model.layers.3.self_attn"])


# expect: False
def case_linear_not_skipped_when_another_layer_is():
    return is_skipped("model.layers.3.self_attn.o_proj", ["lm_head", "model.layers.0."])


# expect: False
def case_a_default_built_by_a_call():
    # the default fused_mapping (a read-only empty mapping) is evaluated, not unknown
    return is_skipped("model.layers.3.self_attn.o_proj", [])


# expect: 'x'
def case_walrus_binds_the_name():
    if (found := "x.y".split(".")[0]) is not None:
        return found
    return "none"


# expect: -2
def case_negative_number():
    return -2
