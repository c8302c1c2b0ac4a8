"""MIG and vGPU layout decisions: :mod:`.layout` and :mod:`.vgpu` (plain data, shared with the node-side applier)
and :mod:`.plan` (the controller's typed entry points)."""
