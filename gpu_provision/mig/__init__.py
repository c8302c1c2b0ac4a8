"""The controller side of MIG and vGPU: :mod:`.plan` (typed entry points over the node-side decision in
:mod:`gpu_provision.node.mig`) and :mod:`.install` (the applier's command, layout files and boot unit on a node)."""
