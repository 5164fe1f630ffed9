"""`speccat price` and `speccat fit` refuse what the night stores unpriced: all three census, price
and check a config the same way (flows/analysis.py `census_priced`)."""

from __future__ import annotations

import json
import os

from bench.bench_registry import default_config

from speccat.catalogue.records.settings import default_setting
from speccat.flows.analysis import analyse
from speccat.flows.cli import main

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# transformers' default zamba2 (docs/census.md, "Known limits": its Mamba2 mixer's heads and groups
# are not divided on a tensor-parallel rank): within the records' tolerance at the census's own
# point, beyond it at tp 8, a point only a census measured across settings has.
MODEL_TYPE = "zamba2"


def test_price_and_fit_refuse_with_the_nights_reason_a_config_it_stores_unpriced(tmp_path, capsys):
    config = default_config(MODEL_TYPE)
    night = analyse(config, MODEL_TYPE, default_setting()["seq_length"])
    assert "prices" not in night and "spec" in night  # the night stores the spec, unpriced
    reason, message = night["price_error"]
    assert reason == "unsupported_layer" and "point 'tp 8'" in message
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    for argv in (["price", str(path), "--name", MODEL_TYPE], ["fit", str(path), "--gpus", "8", "--seq", "4096"]):
        assert main([*argv, "--json"]) == 2, argv[0]
        assert json.loads(capsys.readouterr().out) == {"error": {"reason": reason, "message": message}}, argv[0]
