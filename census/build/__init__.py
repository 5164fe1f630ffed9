"""Build: the language model built on the meta device, made fake, and the inputs a probe hands
a layer."""
