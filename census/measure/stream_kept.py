"""Where each kept storage of a probed layer was made and saved, by the layer's top-level child
(None: the layer's own code between its children), with its elements per token
(LayerProbe.stream_kept).

Hyper-connections (hy_v4's, deepseek_v4's) hand every layer several copies of the hidden stream,
(batch, tokens, streams, width), and mix them in children of the layer that are neither its
attention nor its MLP, whose saves are booked `other`; the layer's own code expands each block's
output back to the streams. What those children and that code keep is told apart here by where
each storage was made and saved, and how many elements a token it holds: the streams' whole
width, or fewer (census/describe/variants_hyper.py reads it). Elements per token are a storage's
bytes over its element's bytes and the layer's tokens (the census runs one sequence).
"""

from __future__ import annotations

from speccat.census.measure.layer_probe import LayerProbe


def _top(path: str | None) -> str | None:
    """The layer's top-level child a module path lies in; None for the layer's own code."""
    return path.split(".", 1)[0] if path else None


def note_stream_kept(watcher, probe: LayerProbe, key: int, saver: int, op: str, nbytes: int) -> None:
    """Book a kept storage's elements per token under (its op, the top-level child that made it,
    the one whose code saved it, its dtype, whether it holds a row of the hidden width or more a
    token): `saver` is its first saver still alive. A storage the layer did not make (its input)
    has no maker (None, as the layer's own code)."""
    if not probe.tokens:
        return
    made = watcher.creator.get(key)
    made_in = _top(made.module) if made is not None and made.probe is probe else None
    saved_in = _top(watcher.saved_in[key][saver][0])
    dtype = watcher.tails[key][1]
    elements = nbytes // dtype.itemsize // probe.tokens
    probe.stream_kept[(op, made_in, saved_in, dtype, elements >= probe.hidden_width)] += elements
