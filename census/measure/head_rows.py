"""What a child's own code keeps per head: the kept storages of a layer's child whose first saved
tensor is laid out over heads after its tokens, (…tokens, heads, w…), or with the token and head
dims folded into rows, (tokens·heads, w), the view a matmul takes of such an operand.

An attention's code may keep more of q and k than the kernel does: inkling2's L2 clips (no norm
modules) keep the fp32 upcast of q and its product with a learned scale, and four fp32
statistics per head, of k likewise; its dynamic short convolutions keep fp32 windows and weights
per kv head: all of it made and kept before the kernel runs, in building its inputs. Their bytes
scale with the heads, so the census states them per head and token
(census/describe/variants_attention.py reads LayerProbe.kept_per_head). What the child keeps
after its kernel ran (its output laid out per head, a gate's product on it) and storages on an
output gate's chain are left to the facts that price them (census/measure/output_gates.py), and
so is what another child or the layer's own code made and the child first kept: hy_v4's
hyper-connection mixer makes post, one fp32 element per stream, (b, s, streams, 1), which the
attention's block keeps (the hc_* facts price it), laid out as a head's row would be.
"""

from __future__ import annotations

from speccat.census.measure.layer_probe import LayerProbe


def heads_of(shape: tuple[int, ...], tokens: int) -> int:
    """The heads a saved tensor of `shape` is laid out over after its `tokens`: the dim after the
    leading dims that hold the tokens, where a dim stands between it and the last
    ((b, s, heads, w): heads); the rows' share of each token where the first of two dims folds
    tokens and heads ((b·s·heads, w): heads); 0 for any other layout (a (b, s, w) row a token,
    a head-major (b, heads, s, w) tensor, a per-layer tensor)."""
    held, dim = 1, 0
    while dim < len(shape) and held < tokens:
        held *= shape[dim]
        dim += 1
    if held == tokens and len(shape) >= dim + 2:
        return shape[dim]
    if len(shape) == 2 and shape[0] > tokens and shape[0] % tokens == 0:
        return shape[0] // tokens
    return 0


def note_head_kept(watcher, probe: LayerProbe, key: int, op: str, nbytes: int) -> None:
    """Book a kept storage of a child (`child:NAME`) laid out over heads after its tokens under
    (its op, the heads, its dtype): its elements per token (LayerProbe.kept_per_head). Left out:
    any other op's storages, one held by no token rows, one on an output gate's chain, one made
    outside the child (Watcher.made_in_child), and one first saved after the child's kernel ran in the
    layer's call (the kernel's output, its copies and a gate's product on it, which o_proj's copy
    and the gate's facts price)."""
    if not op.startswith("child:") or probe.tokens <= 0 or not watcher.made_in_child(probe, key, op.removeprefix("child:")):
        return
    if key in watcher.after_kernel or probe.gate_holding(key) is not None:
        return
    heads = heads_of(watcher.first_shapes[key], probe.tokens)
    if heads:
        dtype = watcher.tails[key][1]
        probe.kept_per_head[(op, heads, dtype)] += nbytes // dtype.itemsize // probe.tokens

