# Registers no torch ops: calling torch.ops.rbln_custom_ops.* fails here.
