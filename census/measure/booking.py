"""Booking what a watched forward left for backward: each storage a probed layer saved that
backward can still reach, on that layer's LayerProbe, to the op of its first saver still alive.

The watcher (census/measure/watcher.py) notes every saver of a storage as the forward runs; after
the forward, with what no output reaches collected, this books the bytes, and what each call
that made a kept storage is kept for (the selective-checkpoint view census/measure/recompute.py
reads).
"""

from __future__ import annotations

from speccat.census.measure.head_rows import note_head_kept
from speccat.census.measure.inline_activations import note_chained
from speccat.census.measure.joint_storages import note_joint
from speccat.census.measure.kept_modules import note_code_kept, note_kept_module
from speccat.census.measure.output_gates import book_gate_kept
from speccat.census.measure.repeated_attention import book_join
from speccat.census.measure.stream_scales import book_stream_scale
from speccat.census.measure.stream_kept import note_stream_kept
from speccat.census.measure.watcher import Watcher


def book_bytes(watcher: Watcher) -> None:
    """Book each storage backward can still reach to the op of its first saver still alive."""
    for key, savers in watcher.seen.items():
        if key in watcher.excluded_outputs:
            continue
        alive = next(((index, probe, op, nbytes, part) for index, (probe, op, nbytes, held, part) in enumerate(savers) if held() is not None), None)
        if alive is not None:
            saver, probe, op, nbytes, part = alive
            if part is not None and not any(call.child == watcher.up_input_children.get(key) for call in probe.kernels):
                part = None  # a norm's output a projection keeps in a child that runs no kernel (bitnet's ffn_sub_norm's, down_proj's): no up-projection's input
            if key in watcher.activation_inputs and op.startswith("child:"):
                op = "ffAct"  # autograd saves an op's inputs before the op dispatches: an inline activation's input is told after
            probe.saved_bytes[op] += nbytes
            if key in probe.value_storages:
                probe.values_booked[key] = op
            probe.saved_storages[op] += 1
            book_gate_kept(watcher, probe, key, op, nbytes)
            book_join(watcher, probe, key, op)
            book_stream_scale(watcher, probe, key, saver, op, nbytes)
            probe.kept_tails[(op, *watcher.tails[key])] += 1
            note_head_kept(watcher, probe, key, op, nbytes)
            note_kept_module(watcher, probe, key, saver, op, nbytes)
            note_stream_kept(watcher, probe, key, saver, op, nbytes)
            note_code_kept(watcher, probe, key, saver, op, nbytes)
            note_chained(watcher, probe, key)
            if key in watcher.param_casts:
                probe.param_casts_kept[watcher.param_casts[key]] += 1
            tail, dtype = watcher.tails[key]
            # a table of the scores' square shape: first saved 4-D, or 2-D holding no floats (a mask or an
            # index: a 2-D float storage may be rows of a token each, as wide as the tokens)
            square = key in watcher.four_d or (len(watcher.first_shapes[key]) == 2 and not dtype.is_floating_point)
            if square and tail[0] == tail[1] and nbytes == tail[0] * tail[1] * dtype.itemsize:
                probe.kept_square[(op, tail[0], dtype)] += 1
            if op == "ffAct":
                probe.act_kept.add(key)
                if key in watcher.act_child:
                    probe.mixer_act_kept[watcher.act_child[key]] += 1
            made = watcher.creator.get(key)
            if made is not None and made.probe is probe:
                probe.kept_by_call.setdefault(made.call, set()).add(part or op)
                probe.kept_by_call[made.call] |= note_joint(probe, key, savers, watcher.layers[probe.index], made)  # kept until every op keeping it is recomputed
                probe.booked_as.setdefault(made.call, op)
                probe.kept_outputs.setdefault(made.call, set()).add(made.position)
            else:
                probe.input_bytes[op] += nbytes  # a storage the layer did not make: its input
