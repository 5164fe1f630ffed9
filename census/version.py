"""The census version the catalogue stores with each spec; bump it whenever the census's output changes."""

CENSUS_VERSION = "2"  # 2: kinds named from facts, built_as, structural stacks, routed attention (issue 12)
