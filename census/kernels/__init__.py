"""Kernels: speccat's attention, scan and recurrence kernels as torch.library custom ops (a real
CPU implementation, a fake one and what each keeps for backward), the attention function
transformers calls, and the routing of attention written outside transformers' interface."""
