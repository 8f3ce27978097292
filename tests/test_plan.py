"""``plan_summary``: a layer plan in one line — each distinct setting once, with its layer count."""

from __future__ import annotations

from posenc.plan import LayerSpec, QueryScale, Window, every, plan_rows, plan_summary


def test_interleaved_layers_are_counted_together_in_order_of_first_use():
    local = LayerSpec(position_options={"base": 1e4, "pairing": "half"}, window=Window("sliding", 512))
    plan = every(6, layers=18, hit=LayerSpec(position_options={"base": 1e6}), other=local)
    assert plan_summary(plan_rows(plan)) == "per layer: rope base 1e4 sliding 512 ×15, rope base 1e6 ×3"


def test_nope_layers_query_scales_and_plain_numbers():
    rope = LayerSpec(position_options={"base": 500000.0, "factor": 8.0}, window=Window("chunked", 8192))
    nope = LayerSpec(position="none", query_scale=QueryScale("llama4", {"floor_scale": 8192.0, "attn_scale": 0.1}))
    summary = plan_summary(plan_rows(every(4, layers=8, hit=nope, other=rope)))
    assert summary == ("per layer: rope base 5e5 factor 8 chunked 8,192 ×6, "
                       "none query scale llama4(floor_scale=8192, attn_scale=0.1) ×2")
