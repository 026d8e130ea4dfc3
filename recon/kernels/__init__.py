"""``recon kernels``: the runtime view applied to a whole step — for each layer kind of the model,
the code path that runs on a device for the server flags and environment, the decisions that chose
it, whether it is captured in the CUDA graph, launches per step, and the roofline floor.

Same floor as :mod:`recon.runtime` (what runs), walking with the scenario's engine. A new layer kind
goes into :mod:`.step`; :mod:`.kmap` puts the kinds together for one step; :mod:`.budget` sizes each
row. The rendering is :mod:`recon.render.kernels`; the budget's rows for work the rules find beside
the launches are added above the checks (:func:`recon.scenario.kernel_map_of`).
"""
