import pytest

from posenc.positions import build, lookup, names


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
