"""Describe: from the built modules and their probes to the ModelSpec's facts: op counts,
variants and the checks that a layer was understood."""
