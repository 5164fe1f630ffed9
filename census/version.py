"""The census version the catalogue stores with each spec; bump it whenever the census's output changes."""

CENSUS_VERSION = "6"  # 2: kinds named from facts, built_as, structural stacks, routed attention (issue 12); 3: what backward can reach, CUDA dtypes, variant facts (issue 11); 4: measured across settings (measured_at); 5: top-k from the experts call, norm_weight_copy, the model's ends (ends); 6: variant facts scan_apart and scan_norms, Mamba mixers with the scan apart (jamba) and with B, C and dt norms (falcon-mamba)
