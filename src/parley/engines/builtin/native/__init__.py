"""The native decode step: one C function runs a whole decode forward (build.py compiles it on
the serving machine, decoder.py hands it the model's tensors)."""
