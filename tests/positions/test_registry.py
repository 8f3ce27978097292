import re
from pathlib import Path

import pytest

import posenc
from posenc.positions import aliases, build, canonical, lookup, model_context, names, option_names


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError) as err:
        build("ropee", dim=16, num_heads=2)
    assert "ropee" in str(err.value)
    for name in names():
        assert name in str(err.value)


def test_unknown_option_lists_valid_options():
    with pytest.raises(ValueError, match=r"takes no option\(s\) \['bsae'\].*base"):
        build("rope", dim=16, num_heads=2, bsae=10)


def test_family_gets_its_context():
    assert build("rope", dim=64, num_heads=4).head_dim == 16
    assert build("alibi", dim=64, num_heads=4).num_heads == 4
    assert build("sinusoidal", dim=64, num_heads=4).dim == 64
    assert build("naive", dim=64, num_heads=4).dim == 63  # one coordinate is the index


@pytest.mark.parametrize("name", names())
def test_every_scheme_describes_itself(name):
    scheme = build(name, dim=32, num_heads=4)
    info = scheme.describe()
    assert info["name"] == name and info["family"] == lookup(name).family


# -- aliases -------------------------------------------------------------------
@pytest.mark.parametrize(("alias", "real"), [("nope", "none"), ("absolute", "sinusoidal")])
def test_alias_builds_the_scheme_it_stands_for(alias, real):
    assert canonical(alias) == real and aliases()[alias] == real
    assert type(build(alias, dim=16, num_heads=2)) is lookup(real)
    assert build(alias, dim=16, num_heads=2).name == real  # describes itself by its registered name


def test_aliases_point_at_registered_names_and_never_shadow_one():
    for alias, real in aliases().items():
        assert real in names() and alias not in names()


def test_unknown_name_also_lists_the_aliases():
    with pytest.raises(ValueError, match=r"'nopee'.*aliases: absolute \(= sinusoidal\), nope \(= none\)"):
        canonical("nopee")


def test_canonical_of_a_registered_name_is_itself():
    assert [canonical(n) for n in names()] == names()


# -- the model context ---------------------------------------------------------
def test_max_length_sizes_the_tables_that_need_one():
    assert build("learned", dim=16, num_heads=2, max_length=37).max_len == 37
    assert build("randomized", dim=16, num_heads=2, max_length=41).max_len == 41
    assert build("learned", dim=16, num_heads=2).max_len == 1024  # no length known: the scheme's default


def test_causal_gives_t5_one_directional_buckets():
    assert build("t5", dim=16, num_heads=2, causal=True).bidirectional is False
    assert build("t5", dim=16, num_heads=2).bidirectional is True


def test_options_override_the_model_context():
    assert build("learned", dim=16, num_heads=2, max_length=37, max_len=5).max_len == 5
    assert build("t5", dim=16, num_heads=2, causal=True, bidirectional=True).bidirectional is True


def test_shaw_gets_the_head_width():
    assert build("shaw", dim=48, num_heads=4).head_dim == 12


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("causal", [False, True])
def test_every_context_argument_is_a_constructor_option(name, causal):
    """The context a scheme asks for must be something its constructor takes (a typo would fail here)."""
    context = model_context(name, dim=32, num_heads=4, max_length=64, causal=causal)
    assert set(context) <= set(option_names(name))
    assert build(name, dim=32, num_heads=4, max_length=64, causal=causal).family == lookup(name).family


@pytest.mark.parametrize(("dim", "heads", "max_length"), [(30, 4, None), (32, 0, None), (32, 4, 0)])
def test_a_model_shape_that_does_not_fit_names_the_values(dim, heads, max_length):
    with pytest.raises(ValueError, match=str(dim) if max_length is None else "max_length"):
        build("rope", dim=dim, num_heads=heads, max_length=max_length)


def test_only_the_registry_reads_constructor_signatures():
    """Nothing outside positions/__init__.py inspects a constructor: it asks the registry (option_names)."""
    src = Path(posenc.__file__).parent
    # bench/compiled.py reads HF LlamaForCausalLM.forward (its cache keyword changed name), not a scheme
    allowed = {src / "positions" / "__init__.py", src / "bench" / "compiled.py"}
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if p not in allowed and re.search(r"inspect\.signature|signature\(\w+\.__init__", p.read_text())]
    assert not offenders, f"read the registry's option_names() instead of a signature in: {offenders}"
