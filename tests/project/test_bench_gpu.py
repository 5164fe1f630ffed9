"""The GPU check (`python -m bench gpu`, docs/census.md "The GPU check"): without CUDA one line and
exit 0; its harness, run on the CPU, books what the census books where the census's kernel is
the one that runs, and finds what a sliding window's explicit mask adds where it is not."""

from __future__ import annotations

import torch
from support.storage_tracker import StorageTracker

from bench import bench_gpu

S = 64
TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
}  # fmt: skip
# one sliding-window layer (window 16 < 64 tokens: sdpa gets an explicit mask), one full layer
TINY_GEMMA3 = {
    "model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "sliding_window": 16,
    "layer_types": ["sliding_attention", "full_attention"], "vocab_size": 128,
}  # fmt: skip


def test_without_cuda_it_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gpu.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("bench gpu: no CUDA device")


def test_the_harness_books_what_the_census_books():
    """A real CPU run of a tiny llama layer (sdpa, causal, no mask: CPU's flash kernel) keeps what
    the census measured, byte for byte, and the harness's own run on fake tensors agrees; the
    only tensors that differ are the attention output's layout (heads-major on the CPU)."""
    (row,) = bench_gpu.measure("tiny-llama", TINY_LLAMA, (S,), "cpu")
    assert row["kind"] == "decoder" and row["attention"] == "flash"  # CPU sdpa: its flash kernel
    assert row["census"] == row["measured"] == row["real"]
    assert {what for what, _ in row["differences"]} == {"+[1, 4, 64, 16] bfloat16", "-[1, 64, 4, 16] bfloat16"}


def test_a_sliding_window_keeps_its_mask_beside_what_the_census_books():
    """The sliding layer hands sdpa an explicit (1, 1, s, s) bf16 mask, which the kernel keeps for
    backward: 2·s bytes per token more than the census's own kernel keeps, and what the records
    price at the default attention kernel (`auto`: its one kv head repeated is a view, so the
    mask is all); the full layer, with no mask, keeps exactly what the census books. Sliding and
    full layers are kinds apart."""
    rows = {row["kind"]: row for row in bench_gpu.measure("tiny-gemma3", TINY_GEMMA3, (S,), "cpu")}
    assert set(rows) == {"sliding_dense sliding_attention", "full_dense full_attention"}
    sliding, full = rows["sliding_dense sliding_attention"], rows["full_dense full_attention"]
    assert full["real"] == full["census"] == full["measured"]
    assert sliding["real"] - sliding["census"] == 2 * S == sliding["priced"] - full["priced"]
    assert ("+[1, 1, 64, 64] bfloat16", 2 * S * S) in sliding["differences"]


def test_a_spec_the_night_stores_unpriced_is_said_so(tmp_path, monkeypatch):
    """A layer keeping what no record prices: the census measures it, the records' price is beyond
    their tolerance, and the night stores the spec without prices. The row says so. Every registry
    type's layers are priced at their defaults, so here the records leave a part out: the stream
    norms' slot never applies (its `when`), and tiny llama's norms are what no record prices."""
    import speccat.catalogue.records.oprecords as oprecords
    import speccat.flows.analysis as analysis

    text = oprecords.RECORDS_PATH.read_text()
    cut = text.replace("  norm:\n    part: norm\n    when: runs == 1\n", "  norm:\n    part: norm\n    when: runs == 0\n", 1)
    assert cut != text
    (tmp_path / "records.yaml").write_text(cut)
    records = oprecords.load_records(tmp_path / "records.yaml")
    _, settings, costs, ends = analysis.pricing_inputs()
    monkeypatch.setattr(analysis, "pricing_inputs", lambda: (records, settings, costs, ends))
    monkeypatch.setattr(oprecords, "load_records", lambda *args, **kwargs: records)
    (row,) = bench_gpu.measure("tiny-llama", TINY_LLAMA, (S,), "cpu")
    assert row["unpriced"] == "unsupported_layer"
    assert row["real"] == row["census"] == row["measured"] > row["priced"] * 1.1
    monkeypatch.undo()
    (llama,) = bench_gpu.measure("tiny-llama", TINY_LLAMA, (S,), "cpu")
    assert llama["unpriced"] is None and llama["priced"] == llama["measured"]


def test_a_norm_written_as_torch_ops_is_priced_as_it_keeps():
    """cohere's LayerNorm, written as torch ops, keeps three fp32 rows of the width (its centred
    input twice, the normalised input: the variant norm_fp32_extra is 2 beyond the upcast input
    the records count already); a real CPU forward and backward keeps what the records price."""
    tiny_cohere = {**TINY_LLAMA, "model_type": "cohere", "use_qk_norm": False}
    (row,) = bench_gpu.measure("tiny-cohere", tiny_cohere, (S,), "cpu")
    assert row["unpriced"] is None
    assert row["real"] == row["census"] == row["measured"] == row["priced"]
    from speccat.census import run_census

    assert run_census(tiny_cohere, name="tiny-cohere", seq_length=S)["variants"]["decoder"]["norm_fp32_extra"] == 2


def test_the_forward_alone_keeps_what_the_whole_step_keeps():
    """`--forward-only`: the saved tensors are packed in the forward, so a run without the
    backward books the same bytes, tensor for tensor."""
    (whole,) = bench_gpu.measure("tiny-llama", TINY_LLAMA, (S,), "cpu")
    (forward,) = bench_gpu.measure("tiny-llama", TINY_LLAMA, (S,), "cpu", backward=False)
    assert forward["real"] == whole["real"] and forward["differences"] == whole["differences"]


def test_the_backward_peak_is_the_censuss_beside_the_gpus():
    """Each row sets the census's backward peak (the spec's measured backward_peak, per token) beside
    the GPU's, which only CUDA's allocator measures: on the CPU the real one is left blank ('-')."""
    from speccat.census import run_census

    (row,) = bench_gpu.measure("tiny-llama", TINY_LLAMA, (S,), "cpu")
    spec = run_census(TINY_LLAMA, name="tiny-llama", seq_length=S).to_dict()
    assert row["backward_census"] == spec["measured"]["decoder"]["backward_peak"] / S > 0
    assert row["backward_real"] is None
    assert f"{'-':>12} {row['backward_census']:>12,.1f}" in bench_gpu.row_line(row)


class CountingAllocator(StorageTracker):
    """What CUDA's allocator reports, counted on the CPU: the bytes of the storages ops made while
    it runs that are still alive, and the most since the last reset."""

    def __init__(self):
        super().__init__([])
        self.peak = 0

    def allocated(self) -> int:
        return self.bytes(self.alive())

    def reset(self) -> None:
        self.peak = self.allocated()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.peak = max(self.peak, self.bytes(self.timeline[-1]))
        return out


def test_the_gpu_side_of_the_backward_peak_on_a_counting_allocator(monkeypatch):
    """The harness's CUDA path (each layer's window between its gradient hooks, read from the
    allocator's peak after a reset) run on the CPU against an allocator counted storage by
    storage: a tiny llama's layer peaks at what the census measures, byte for byte."""
    from speccat.census import run_census

    allocator = CountingAllocator()
    monkeypatch.setattr(torch.cuda, "memory_allocated", allocator.allocated)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: allocator.peak)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", allocator.reset)
    monkeypatch.setattr(bench_gpu, "weight_device", lambda built: torch.device("cuda"))
    with allocator:
        _, _, peaks = bench_gpu.real_run(TINY_LLAMA, 2, [0, 1], S, "cpu")
    spec = run_census(TINY_LLAMA, name="tiny-llama", seq_length=S).to_dict()
    assert peaks[0] == peaks[1] == spec["measured"]["decoder"]["backward_peak"] > 0
