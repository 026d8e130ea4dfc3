"""``recon kernels``: the runtime view applied to a whole step — for each layer kind of the model,
the code path that runs on a device for the server flags and environment, the decisions that chose
it, whether it is captured in the CUDA graph, launches per step, and the roofline floor."""
