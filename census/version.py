"""The census version the catalogue stores with each spec; bump it whenever the census's output changes."""

CENSUS_VERSION = "1"
