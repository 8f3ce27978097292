"""Request validation: every parameter typed and bounded, with a message naming it (English and Korean)."""

from __future__ import annotations

import pytest

from posenc.explore import params
from posenc.explore.params import ParamError, parse_view
from posenc.positions import build, names, options


def refused(query: dict[str, str]) -> ParamError:
    with pytest.raises(ParamError) as info:
        parse_view(query)
    err = info.value
    assert err.en and err.ko and err.en != err.ko
    return err


def test_defaults_are_the_labs():
    req = parse_view({})
    assert (req.scheme, req.dim, req.length, req.base, req.seed, req.start, req.window, req.head) == (
        "sinusoidal", 64, 512, 10000.0, 0, 0, 64, 0)
    assert req.heads == 4 and parse_view({"dim": "6"}).heads == 1


@pytest.mark.parametrize("field,value,fragment", [
    ("dim", "abc", "not a whole number"), ("dim", "63", "odd"), ("dim", "2", "out of range"),
    ("dim", str(params.MAX_DIM + 2), "out of range"), ("dim", "1e3", "not a whole number"),
    ("length", "7", "out of range"), ("length", str(params.MAX_LENGTH + 1), "out of range"),
    ("start", "-1", "out of range"), ("start", str(params.MAX_START + 1), "out of range"),
    ("window", "5", "out of range"), ("window", str(params.MAX_WINDOW + 1), "out of range"),
    ("head", "4", "out of range"), ("head", "-1", "out of range"), ("seed", "x", "not a whole number"),
    ("base", "nan", "not finite"), ("base", "inf", "not finite"), ("base", "1", "> 1"), ("base", "", "not a number"),
    ("scale", "0", "> 0"), ("scale", "-2", "> 0"), ("scale", "nan", "not finite"), ("scale", "1e9", "too large"),
    ("scheme", "nope-nope", "unknown scheme"), ("bogus", "1", "unknown parameter"),
])
def test_each_bad_value_is_refused_by_name(field, value, fragment):
    err = refused({field: value})
    assert err.field == field and fragment in err.en


def test_aliases_resolve_to_the_registered_name():
    assert parse_view({"scheme": "nope"}).scheme == "none"
    assert parse_view({"scheme": "absolute"}).scheme == "sinusoidal"


def test_head_must_exist_for_the_width():
    assert parse_view({"dim": "8", "head": "3"}).head == 3
    assert "1 head(s)" in refused({"dim": "6", "head": "1"}).en


@pytest.mark.parametrize("name", names())
def test_options_describe_every_scheme(name):
    specs = options(name)
    assert all(o["type"] in ("int", "float", "bool", "choice", "floats") for o in specs)
    assert not {o["name"] for o in specs} & {"dim", "head_dim", "num_heads"}  # the model's, not the scheme's
    # the defaults the page shows, passed back explicitly, build the scheme the registry builds by default
    explicit = {o["name"]: o["default"] for o in specs}
    assert build(name, dim=64, num_heads=4, **explicit).options() == build(name, dim=64, num_heads=4).options()
    # and each default survives the page's round trip through a query string
    query = {"scheme": name}
    for o in specs:
        d = o["default"]
        query[f"opt.{o['name']}"] = "" if d is None else ",".join(map(str, d)) if isinstance(d, list) else str(d)
    assert dict(parse_view(query).options) == explicit


@pytest.mark.parametrize("scheme,option,value,fragment", [
    ("rope", "pairing", "diagonal", "not one of"), ("rope", "base", "nan", "not finite"),
    ("rope", "rotary_dim", "2.5", "not a whole number"), ("t5", "bidirectional", "maybe", "not true or false"),
    ("rope-longrope", "short_factor", "1,x", "not a number"), ("sinusoidal", "pairing", "half", "unknown parameter"),
    ("learned", "max_len", "", "needs a value"),
])
def test_scheme_options_are_typed_by_the_registry(scheme, option, value, fragment):
    err = refused({"scheme": scheme, f"opt.{option}": value})
    assert fragment in err.en and err.field == f"opt.{option}"


def test_option_values_are_parsed():
    req = parse_view({"scheme": "rope-longrope", "opt.short_factor": "1, 2.5", "opt.rotary_dim": "",
                      "opt.pairing": "interleaved"})
    assert req.options == {"short_factor": [1.0, 2.5], "rotary_dim": None, "pairing": "interleaved"}
    assert parse_view({"scheme": "t5", "opt.bidirectional": "false"}).options == {"bidirectional": False}


def test_the_cost_model_refuses_a_large_property_row():
    small = params.property_seconds("t5", {}, length=512, heads=4, table_width=None)
    big = params.property_seconds("sinusoidal", {}, length=4096, heads=1, table_width=1024)
    assert small <= params.REQUEST_SECONDS < big
    # FIRE's MLP width scales its cost; a wider MLP admits a shorter L
    assert params.property_seconds("fire", {"mlp_width": 128}, length=256, heads=4, table_width=None) > \
        params.property_seconds("fire", {}, length=256, heads=4, table_width=None)


def test_options_that_size_tables_are_capped_by_name():
    largest = params.largest_options("learned", 64)["max_len"]
    assert largest * 64 <= params.MAX_TABLE_ENTRIES < (largest + 1) * 64
    assert parse_view({"scheme": "learned", "dim": "64", "opt.max_len": str(largest)}).options["max_len"] == largest
    with pytest.raises(ParamError) as info:
        parse_view({"scheme": "learned", "dim": "64", "opt.max_len": str(largest + 1)})
    assert info.value.field == "opt.max_len" and f"{largest + 1}" in info.value.en and f"{largest:,}" in info.value.en
    for scheme, option in (("shaw", "max_distance"), ("t5", "num_buckets"), ("randomized", "max_len"),
                           ("fire", "mlp_width")):
        top = params.largest_options(scheme, 64)[option]
        parse_view({"scheme": scheme, "dim": "64", f"opt.{option}": str(top)})
        with pytest.raises(ParamError) as info:
            parse_view({"scheme": scheme, "dim": "64", f"opt.{option}": str(top + 1)})
        assert info.value.field == f"opt.{option}" and str(top + 1) in info.value.en, scheme
