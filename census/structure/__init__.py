"""Structure: what the parts of a built model are, read from the modules themselves (norms,
projections, experts, the layer stack), the distinct layer shapes and their kind names, and
the family profiles that name what a family declares."""
