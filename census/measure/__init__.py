"""Measure: one layer of each shape run forward and backward on fake tensors, what it saves
(whole, under selective recompute, at the model's ends), its FLOPs and the routing it assumes."""
