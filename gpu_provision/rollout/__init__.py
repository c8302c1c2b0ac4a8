"""Rolling changes across a live fleet: what each change disrupts, the batches nodes go in, and the kernel guard.

The pure parts (:mod:`.disruption`, :mod:`.batches`, :mod:`.kernel`) sit beside the model and the probe's result
types, so stages can use them; :mod:`.plan` builds on drift and the fleet runner.
"""
